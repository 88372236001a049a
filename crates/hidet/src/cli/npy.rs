//! Reading and writing tensors as `.npy` files (via `npyz`).

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use hidet::graph::half::{bf16, f16};
use hidet::graph::{DType, Element, Tensor};
use npyz::{TypeChar, WriterBuilder};

use super::CliError;

fn npy_err(path: &Path, message: impl Into<String>) -> CliError {
    CliError::Npy {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Reads a C-order `.npy` file of a numeric or bool dtype.
pub fn read(path: &Path) -> Result<Tensor, CliError> {
    let file = File::open(path).map_err(|e| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let npy = npyz::NpyFile::new(BufReader::new(file)).map_err(|e| npy_err(path, e.to_string()))?;
    if npy.order() != npyz::Order::C {
        return Err(npy_err(
            path,
            "Fortran-order arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| npy_err(path, "dimension too large")))
        .collect::<Result<_, _>>()?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(npy_err(path, "structured/record arrays are not supported"));
    };
    let dtype = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Uint, 2) => DType::U16,
        (TypeChar::Uint, 4) => DType::U32,
        (TypeChar::Uint, 8) => DType::U64,
        (TypeChar::Bool, 1) => DType::Bool,
        _ => return Err(npy_err(path, format!("unsupported npy dtype `{ts}`"))),
    };
    let e = |err: std::io::Error| npy_err(path, err.to_string());
    let t = match dtype {
        DType::F16 => Tensor::new(shape, npy.into_vec::<f16>().map_err(e)?),
        DType::F32 => Tensor::new(shape, npy.into_vec::<f32>().map_err(e)?),
        DType::F64 => Tensor::new(shape, npy.into_vec::<f64>().map_err(e)?),
        DType::I8 => Tensor::new(shape, npy.into_vec::<i8>().map_err(e)?),
        DType::I16 => Tensor::new(shape, npy.into_vec::<i16>().map_err(e)?),
        DType::I32 => Tensor::new(shape, npy.into_vec::<i32>().map_err(e)?),
        DType::I64 => Tensor::new(shape, npy.into_vec::<i64>().map_err(e)?),
        DType::U8 => Tensor::new(shape, npy.into_vec::<u8>().map_err(e)?),
        DType::U16 => Tensor::new(shape, npy.into_vec::<u16>().map_err(e)?),
        DType::U32 => Tensor::new(shape, npy.into_vec::<u32>().map_err(e)?),
        DType::U64 => Tensor::new(shape, npy.into_vec::<u64>().map_err(e)?),
        DType::Bool => Tensor::new(shape, npy.into_vec::<bool>().map_err(e)?),
        DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::I4
        | DType::U4
        | DType::String => return Err(npy_err(path, format!("{dtype} has no .npy dtype"))),
    };
    t.map_err(|err| npy_err(path, err.to_string()))
}

fn write_typed<T: Element + npyz::AutoSerialize>(
    path: &Path,
    shape: &[u64],
    data: &[T],
) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let file = File::create(path).map_err(io)?;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(BufWriter::new(file))
        .begin_nd()
        .map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}

/// Writes `t` as a C-order `.npy` file. bf16 and the float8 types (no numpy dtype) are written
/// as f32, 4-bit integers as i8 / u8, exactly; strings are refused.
pub fn write(path: &Path, t: &Tensor) -> Result<(), CliError> {
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let e = |err: hidet::graph::TensorError| CliError::Other(err.to_string());
    match t.dtype() {
        DType::F16 => write_typed(path, &shape, t.as_slice::<f16>().map_err(e)?),
        DType::BF16 => {
            let v: Vec<f32> = t
                .as_slice::<bf16>()
                .map_err(e)?
                .iter()
                .map(|x| x.to_f32())
                .collect();
            write_typed(path, &shape, &v)
        }
        DType::F32 => write_typed(path, &shape, t.as_slice::<f32>().map_err(e)?),
        DType::F64 => write_typed(path, &shape, t.as_slice::<f64>().map_err(e)?),
        DType::I8 => write_typed(path, &shape, t.as_slice::<i8>().map_err(e)?),
        DType::I16 => write_typed(path, &shape, t.as_slice::<i16>().map_err(e)?),
        DType::I32 => write_typed(path, &shape, t.as_slice::<i32>().map_err(e)?),
        DType::I64 => write_typed(path, &shape, t.as_slice::<i64>().map_err(e)?),
        DType::U8 => write_typed(path, &shape, t.as_slice::<u8>().map_err(e)?),
        DType::U16 => write_typed(path, &shape, t.as_slice::<u16>().map_err(e)?),
        DType::U32 => write_typed(path, &shape, t.as_slice::<u32>().map_err(e)?),
        DType::U64 => write_typed(path, &shape, t.as_slice::<u64>().map_err(e)?),
        DType::Bool => write_typed(path, &shape, t.as_slice::<bool>().map_err(e)?),
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
            let v: Vec<f32> = t.to_f64_vec().into_iter().map(|x| x as f32).collect();
            write_typed(path, &shape, &v)
        }
        DType::I4 => {
            let v: Vec<i8> = t.to_i64_vec().into_iter().map(|x| x as i8).collect();
            write_typed(path, &shape, &v)
        }
        DType::U4 => {
            let v: Vec<u8> = t.to_i64_vec().into_iter().map(|x| x as u8).collect();
            write_typed(path, &shape, &v)
        }
        DType::String => Err(CliError::Other(
            "string tensors cannot be written as .npy".into(),
        )),
    }
}
