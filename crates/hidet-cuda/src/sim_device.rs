//! The simulator device (`--device cuda-sim`): a [`GpuDevice`] whose memory is host memory
//! standing for device memory, and whose kernels run in the GPU simulator
//! ([`crate::sim::Simulator`]) — every block of every launch, with the simulator's checkers
//! (races, uninitialised reads, out-of-bounds accesses, outputs written twice or never).
//!
//! Device pointers are synthetic: allocations are placed in a private address space from
//! [`SimDevice::BASE`] upward, each aligned and separated by a gap, so a pointer never
//! coincides with a host pointer and an overrun past an allocation is caught. A launch copies
//! each argument's bytes out of its allocation into a [`DeviceBuffer`], simulates, and copies
//! the written buffers back. Launches are synchronous.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::device::{DeviceError, DeviceKernel, GpuDevice, KernelParam};
use crate::sim::{BlockSelection, DeviceBuffer, LaunchOptions, SimArg, Simulator};

/// Options of the simulator device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimDeviceOptions {
    /// Buffers of at most this many bytes in total per launch get the global-memory race
    /// checker (its shadow takes 24 bytes per element); larger launches run without it.
    pub race_check_bytes: usize,
}

impl Default for SimDeviceOptions {
    fn default() -> Self {
        SimDeviceOptions {
            race_check_bytes: 1 << 20,
        }
    }
}

/// The simulator device (see the module docs).
#[derive(Debug, Default)]
pub struct SimDevice {
    options: SimDeviceOptions,
    memory: Mutex<SimMemory>,
    /// Graphs captured and replayed so far (`GpuDevice::capture`, `replay`).
    captures: AtomicUsize,
    replays: AtomicUsize,
}

/// A graph of the simulator device: the launches, replayed one after another (exactly what
/// launching them does, since simulated launches are synchronous).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimGraph {
    launches: Vec<(usize, Vec<u64>)>,
}

impl SimGraph {
    /// The recorded launches, in order.
    pub fn launches(&self) -> &[(usize, Vec<u64>)] {
        &self.launches
    }
}

/// The allocations by base address, and where the next one goes.
#[derive(Debug, Default)]
struct SimMemory {
    next: u64,
    allocations: BTreeMap<u64, Vec<u8>>,
}

impl SimMemory {
    /// The allocation holding `[address, address + bytes)` and the offset of `address` in it.
    fn locate(&self, address: u64, bytes: usize, what: &str) -> Result<(u64, usize), DeviceError> {
        let bad = || DeviceError::BadAddress {
            what: what.to_string(),
            address,
            bytes,
        };
        let (&base, data) = self
            .allocations
            .range(..=address)
            .next_back()
            .ok_or_else(bad)?;
        let offset = usize::try_from(address - base).map_err(|_| bad())?;
        if offset.checked_add(bytes).is_none_or(|end| end > data.len()) {
            return Err(bad());
        }
        Ok((base, offset))
    }

    fn slice(&self, address: u64, bytes: usize, what: &str) -> Result<&[u8], DeviceError> {
        let (base, offset) = self.locate(address, bytes, what)?;
        Ok(&self.allocations[&base][offset..offset + bytes])
    }

    fn slice_mut(
        &mut self,
        address: u64,
        bytes: usize,
        what: &str,
    ) -> Result<&mut [u8], DeviceError> {
        let (base, offset) = self.locate(address, bytes, what)?;
        let data = self
            .allocations
            .get_mut(&base)
            .ok_or_else(|| DeviceError::BadAddress {
                what: what.to_string(),
                address,
                bytes,
            })?;
        Ok(&mut data[offset..offset + bytes])
    }
}

/// A loaded kernel: the prepared simulator and its parameters.
#[derive(Debug)]
pub struct SimKernel {
    name: String,
    simulator: Simulator,
    params: Vec<KernelParam>,
}

/// The kernels of one model.
#[derive(Debug)]
pub struct SimModule {
    kernels: Vec<SimKernel>,
}

impl SimDevice {
    /// Graphs captured and graph replays so far, on this device.
    pub fn graph_counts(&self) -> (usize, usize) {
        (
            self.captures.load(Ordering::Relaxed),
            self.replays.load(Ordering::Relaxed),
        )
    }

    /// The first device address handed out (far from any address 0 or small integer).
    pub const BASE: u64 = 0x7f00_0000_0000;
    /// Unused bytes left after every allocation, so an overrun lands outside all of them.
    const GAP: u64 = 4096;

    pub fn new(options: SimDeviceOptions) -> SimDevice {
        SimDevice {
            options,
            ..SimDevice::default()
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, SimMemory> {
        // A panic while the lock was held cannot leave the map inconsistent (every update is
        // one insert, remove or byte copy), so a poisoned lock is still usable.
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl GpuDevice for SimDevice {
    type Module = SimModule;
    type Graph = SimGraph;

    fn name(&self) -> &'static str {
        "cuda-sim"
    }

    fn alloc(&self, bytes: usize) -> Result<u64, DeviceError> {
        let fail = |message: &str| DeviceError::Alloc {
            bytes,
            message: message.to_string(),
        };
        let mut data: Vec<u8> = Vec::new();
        data.try_reserve_exact(bytes.max(1))
            .map_err(|_| fail("out of host memory"))?;
        data.resize(bytes.max(1), 0);
        let align = self.alignment() as u64;
        let mut memory = self.memory();
        let start = memory.next.max(Self::BASE).next_multiple_of(align);
        let end = (data.len() as u64)
            .checked_add(start)
            .and_then(|e| e.checked_add(Self::GAP))
            .ok_or_else(|| fail("address space exhausted"))?;
        memory.next = end;
        memory.allocations.insert(start, data);
        Ok(start)
    }

    unsafe fn free(&self, ptr: u64) -> Result<(), DeviceError> {
        match self.memory().allocations.remove(&ptr) {
            Some(_) => Ok(()),
            None => Err(DeviceError::BadAddress {
                what: "free".into(),
                address: ptr,
                bytes: 0,
            }),
        }
    }

    fn upload(&self, dst: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.memory()
            .slice_mut(dst, data.len(), "upload")?
            .copy_from_slice(data);
        Ok(())
    }

    fn download(&self, src: u64, out: &mut [u8]) -> Result<(), DeviceError> {
        out.copy_from_slice(self.memory().slice(src, out.len(), "download")?);
        Ok(())
    }

    fn load(&self, kernels: &[DeviceKernel]) -> Result<SimModule, DeviceError> {
        let kernels = kernels
            .iter()
            .map(|k| {
                let simulator =
                    Simulator::from_module(&k.module, &k.name).map_err(|e| DeviceError::Load {
                        kernel: k.name.clone(),
                        message: e.to_string(),
                    })?;
                Ok(SimKernel {
                    name: k.name.clone(),
                    simulator,
                    params: k.params.clone(),
                })
            })
            .collect::<Result<_, DeviceError>>()?;
        Ok(SimModule { kernels })
    }

    unsafe fn launch(
        &self,
        module: &SimModule,
        kernel: usize,
        args: &[u64],
    ) -> Result<(), DeviceError> {
        let k = module
            .kernels
            .get(kernel)
            .ok_or_else(|| DeviceError::Launch {
                kernel: format!("#{kernel}"),
                message: "no such kernel".into(),
            })?;
        let fail = |message: String| DeviceError::Launch {
            kernel: k.name.clone(),
            message,
        };
        if args.len() != k.params.len() {
            return Err(fail(format!(
                "{} arguments for {} parameters",
                args.len(),
                k.params.len()
            )));
        }
        let mut sim_args = Vec::with_capacity(args.len());
        {
            let memory = self.memory();
            for (p, &a) in k.params.iter().zip(args) {
                let buffer = if p.written {
                    // Poisoned: a read before the kernel's own write is a fault, and every
                    // element must be written exactly once.
                    DeviceBuffer::output(p.dtype, p.elements)
                } else if p.bytes() == 0 {
                    DeviceBuffer::zeros(p.dtype, 0)
                } else {
                    let what = format!("argument `{}`", p.name);
                    let bytes = memory.slice(a, p.bytes(), &what)?.to_vec();
                    DeviceBuffer::from_bytes(p.dtype, bytes)
                        .ok_or_else(|| fail(format!("argument `{}`: ragged bytes", p.name)))?
                };
                sim_args.push(SimArg::Buffer(buffer));
            }
        }
        let total: usize = k.params.iter().map(KernelParam::bytes).sum();
        let options = LaunchOptions {
            blocks: BlockSelection::All,
            global_races: total <= self.options.race_check_bytes,
        };
        k.simulator
            .launch(&mut sim_args, &options)
            .map_err(|e| fail(e.to_string()))?;
        let mut memory = self.memory();
        for ((p, &a), arg) in k.params.iter().zip(args).zip(sim_args) {
            if !p.written || p.bytes() == 0 {
                continue;
            }
            let SimArg::Buffer(buffer) = arg else {
                return Err(fail(format!("argument `{}` came back as a scalar", p.name)));
            };
            let what = format!("output `{}`", p.name);
            memory
                .slice_mut(a, p.bytes(), &what)?
                .copy_from_slice(&buffer.into_bytes());
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    unsafe fn capture(
        &self,
        module: &SimModule,
        launches: &[(usize, Vec<u64>)],
    ) -> Result<SimGraph, DeviceError> {
        // What a real capture checks without running: the kernels and their arities.
        for (kernel, args) in launches {
            let k = module
                .kernels
                .get(*kernel)
                .ok_or_else(|| DeviceError::Launch {
                    kernel: format!("#{kernel}"),
                    message: "no such kernel".into(),
                })?;
            if k.params.len() != args.len() {
                return Err(DeviceError::Launch {
                    kernel: k.name.clone(),
                    message: format!("{} arguments for {} parameters", args.len(), k.params.len()),
                });
            }
        }
        self.captures.fetch_add(1, Ordering::Relaxed);
        Ok(SimGraph {
            launches: launches.to_vec(),
        })
    }

    unsafe fn replay(&self, module: &SimModule, graph: &SimGraph) -> Result<(), DeviceError> {
        self.replays.fetch_add(1, Ordering::Relaxed);
        for (kernel, args) in &graph.launches {
            // SAFETY: the caller guarantees the capture's contract now, which is `launch`'s
            // for every launch of the graph, in order.
            unsafe { self.launch(module, *kernel, args)? };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_bounded_by_their_allocation() {
        let d = SimDevice::default();
        let a = d.alloc(16).unwrap();
        let b = d.alloc(16).unwrap();
        assert_eq!(a % 256, 0);
        assert!(b > a + 16, "allocations are apart");
        d.upload(a + 8, &[1; 8]).unwrap();
        let mut out = [0u8; 16];
        d.download(a, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert!(matches!(
            d.upload(a + 9, &[1; 8]),
            Err(DeviceError::BadAddress { .. })
        ));
        assert!(d.download(a - 1, &mut out).is_err());
        // SAFETY: nothing is launched on this device.
        unsafe { d.free(a).unwrap() };
        assert!(d.download(a, &mut out).is_err());
        assert!(d.download(b, &mut out).is_ok());
    }
}
