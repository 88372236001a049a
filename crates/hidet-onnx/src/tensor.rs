//! `TensorProto` → [`Tensor`].

use std::path::Path;

use hidet_graph::half::{bf16, f16};
use hidet_graph::string::Str;
use hidet_graph::{DType, Tensor};
use prost::Message;

use crate::error::OnnxError;
use crate::external::with_external_bytes;
use crate::proto::{tensor_proto::DataLocation, TensorProto};

fn invalid(name: &str, msg: impl std::fmt::Display) -> OnnxError {
    OnnxError::Invalid(format!("tensor `{name}`: {msg}"))
}

/// Converts a `TensorProto` to a tensor.
///
/// Data comes from `raw_data` (little-endian), the typed repeated fields, or external data
/// (resolved in `base_dir`; external data without a `base_dir` is an error). Every declared
/// size is checked against the data actually present before any buffer is allocated.
///
/// Strings come from `string_data` (UTF-8; other encodings are unsupported).
/// Float8 data is one byte per element (in `raw_data`, or one pattern per `int32_data`
/// value); 4-bit integers are packed two per byte, the first element in the low nibble (in
/// `raw_data`, or one packed byte per `int32_data` value), and unpacked to one element per
/// byte in the tensor.
pub fn tensor_from_proto(p: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor, OnnxError> {
    let name = p.name();
    let code = p.data_type();
    let dtype = DType::from_onnx_code(code)
        .ok_or_else(|| OnnxError::Unsupported(format!("tensor `{name}`: ONNX data type {code}")))?;
    if p.segment.is_some() {
        return Err(OnnxError::Unsupported(format!(
            "tensor `{name}`: segmented tensors"
        )));
    }
    let shape: Vec<usize> = p
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| invalid(name, format!("negative dimension {d}"))))
        .collect::<Result<_, _>>()?;
    let numel = hidet_graph::tensor::checked_numel(&shape)
        .ok_or_else(|| invalid(name, "too many elements"))?;
    let nbytes = if dtype.is_int4() {
        numel.div_ceil(2)
    } else {
        numel
            .checked_mul(dtype.size_in_bytes())
            .ok_or_else(|| invalid(name, "too many bytes"))?
    };
    // Raw little-endian bytes of exactly `nbytes` → tensor (4-bit integers unpacked).
    let from_bytes = |b: &[u8]| -> Result<Tensor, OnnxError> {
        if dtype.is_int4() {
            if b.len() != nbytes {
                return Err(invalid(
                    name,
                    format!("{} bytes for {numel} packed 4-bit elements", b.len()),
                ));
            }
            Tensor::from_le_bytes(dtype, shape.clone(), &unpack_nibbles(b, numel))
        } else {
            Tensor::from_le_bytes(dtype, shape.clone(), b)
        }
        .map_err(|source| OnnxError::Tensor {
            name: name.to_string(),
            source,
        })
    };
    let tensor_err = |source| OnnxError::Tensor {
        name: name.to_string(),
        source,
    };

    if dtype == DType::String {
        // Strings live in string_data only (one UTF-8 byte string per element).
        if p.data_location() == DataLocation::External || p.raw_data.is_some() {
            return Err(invalid(name, "string tensors must use string_data"));
        }
        if p.string_data.len() != numel {
            return Err(invalid(
                name,
                format!(
                    "{} strings for shape {shape:?} ({numel} elements)",
                    p.string_data.len()
                ),
            ));
        }
        let v = p
            .string_data
            .iter()
            .map(|b| {
                std::str::from_utf8(b).map(Str::new).map_err(|e| {
                    OnnxError::Unsupported(format!("tensor `{name}`: non-UTF-8 string: {e}"))
                })
            })
            .collect::<Result<Vec<Str>, _>>()?;
        return Tensor::new(shape, v).map_err(tensor_err);
    }

    if p.data_location() == DataLocation::External {
        let base =
            base_dir.ok_or_else(|| invalid(name, "external data needs the model's folder"))?;
        let mut location = None;
        let (mut offset, mut length) = (0u64, None);
        for kv in &p.external_data {
            let v = kv.value();
            match kv.key() {
                "location" => location = Some(v.to_string()),
                "offset" => {
                    offset = v
                        .parse()
                        .map_err(|_| invalid(name, format!("bad external offset `{v}`")))?
                }
                "length" => {
                    length = Some(
                        v.parse::<u64>()
                            .map_err(|_| invalid(name, format!("bad external length `{v}`")))?,
                    )
                }
                _ => {}
            }
        }
        let location = location.ok_or_else(|| invalid(name, "external data without location"))?;
        if let Some(l) = length {
            if l != nbytes as u64 {
                return Err(invalid(
                    name,
                    format!("external length {l} != {nbytes} bytes for shape {shape:?}"),
                ));
            }
        }
        return with_external_bytes(base, &location, offset, Some(nbytes as u64), from_bytes);
    }

    if let Some(raw) = &p.raw_data {
        return from_bytes(raw);
    }
    if dtype.is_storage_only() {
        // One byte (float8 pattern, or two packed 4-bit values) per int32_data value.
        if p.int32_data.len() != nbytes {
            return Err(invalid(
                name,
                format!(
                    "{} int32_data values for shape {shape:?} ({nbytes} bytes of {dtype})",
                    p.int32_data.len()
                ),
            ));
        }
        let bytes: Vec<u8> = p.int32_data.iter().map(|&x| x as u8).collect();
        return from_bytes(&bytes);
    }

    let check = |len: usize| -> Result<(), OnnxError> {
        if len != numel {
            Err(invalid(
                name,
                format!("{len} values for shape {shape:?} ({numel} elements)"),
            ))
        } else {
            Ok(())
        }
    };
    let t = match dtype {
        DType::F32 => {
            check(p.float_data.len())?;
            Tensor::new(shape.clone(), p.float_data.clone())
        }
        DType::F64 => {
            check(p.double_data.len())?;
            Tensor::new(shape.clone(), p.double_data.clone())
        }
        DType::I64 => {
            check(p.int64_data.len())?;
            Tensor::new(shape.clone(), p.int64_data.clone())
        }
        DType::U32 | DType::U64 => {
            check(p.uint64_data.len())?;
            if dtype == DType::U64 {
                Tensor::new(shape.clone(), p.uint64_data.clone())
            } else {
                Tensor::new(
                    shape.clone(),
                    p.uint64_data.iter().map(|&v| v as u32).collect(),
                )
            }
        }
        _ => {
            check(p.int32_data.len())?;
            let v = &p.int32_data;
            match dtype {
                DType::I32 => Tensor::new(shape.clone(), v.clone()),
                DType::I16 => Tensor::new(shape.clone(), v.iter().map(|&x| x as i16).collect()),
                DType::I8 => Tensor::new(shape.clone(), v.iter().map(|&x| x as i8).collect()),
                DType::U16 => Tensor::new(shape.clone(), v.iter().map(|&x| x as u16).collect()),
                DType::U8 => Tensor::new(shape.clone(), v.iter().map(|&x| x as u8).collect()),
                DType::Bool => Tensor::new(shape.clone(), v.iter().map(|&x| x != 0).collect()),
                // f16/bf16 are stored as their bit patterns in int32_data.
                DType::F16 => Tensor::new(
                    shape.clone(),
                    v.iter().map(|&x| f16::from_bits(x as u16)).collect(),
                ),
                DType::BF16 => Tensor::new(
                    shape.clone(),
                    v.iter().map(|&x| bf16::from_bits(x as u16)).collect(),
                ),
                _ => return Err(invalid(name, format!("no data field for {dtype}"))),
            }
        }
    };
    t.map_err(tensor_err)
}

/// The `n` 4-bit values packed in `b` (low nibble first), one per byte, each in its byte's low
/// nibble. `b` holds at least `ceil(n / 2)` bytes.
fn unpack_nibbles(b: &[u8], n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            let byte = b[i / 2];
            if i % 2 == 0 {
                byte & 0x0f
            } else {
                byte >> 4
            }
        })
        .collect()
}

/// Reads a file holding one serialized `TensorProto` (as in the ONNX node tests) and returns
/// its name and value. External data is resolved in the file's folder.
pub fn load_tensor_file(path: &Path) -> Result<(String, Tensor), OnnxError> {
    let bytes = std::fs::read(path).map_err(|e| OnnxError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let p = TensorProto::decode(bytes.as_slice())?;
    let t = tensor_from_proto(&p, path.parent())?;
    Ok((p.name().to_string(), t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_and_typed_data() {
        let p = TensorProto {
            dims: vec![2],
            data_type: Some(1),
            raw_data: Some(
                [1.5f32, -2.0]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect(),
            ),
            ..Default::default()
        };
        assert_eq!(
            tensor_from_proto(&p, None)
                .unwrap()
                .as_slice::<f32>()
                .unwrap(),
            &[1.5, -2.0]
        );
        let p = TensorProto {
            dims: vec![3],
            data_type: Some(7),
            int64_data: vec![1, 2],
            ..Default::default()
        };
        assert!(
            tensor_from_proto(&p, None).is_err(),
            "2 values for 3 elements"
        );
        let p = TensorProto {
            dims: vec![-1],
            data_type: Some(1),
            ..Default::default()
        };
        assert!(tensor_from_proto(&p, None).is_err());
        let p = TensorProto {
            dims: vec![i64::MAX, i64::MAX],
            data_type: Some(1),
            raw_data: Some(vec![]),
            ..Default::default()
        };
        assert!(tensor_from_proto(&p, None).is_err());
    }

    #[test]
    fn narrow_types_unpack() {
        use hidet_graph::narrow::{F8E5M2, I4, U4};
        // Five int4 values packed low nibble first: -8, 7 | -1, 0 | 3 (high nibble unused).
        let packed = vec![0x78u8, 0x0f, 0x03];
        for raw in [true, false] {
            let mut p = TensorProto {
                dims: vec![5],
                data_type: Some(22),
                ..Default::default()
            };
            if raw {
                p.raw_data = Some(packed.clone());
            } else {
                p.int32_data = packed.iter().map(|&b| b as i32).collect();
            }
            let t = tensor_from_proto(&p, None).unwrap();
            assert_eq!(
                t.as_slice::<I4>().unwrap(),
                &[I4(-8), I4(7), I4(-1), I4(0), I4(3)]
            );
            p.data_type = Some(21);
            let t = tensor_from_proto(&p, None).unwrap();
            assert_eq!(
                t.as_slice::<U4>().unwrap(),
                &[U4(8), U4(7), U4(15), U4(0), U4(3)]
            );
        }
        let p = TensorProto {
            dims: vec![4],
            data_type: Some(22),
            raw_data: Some(vec![0x12]),
            ..Default::default()
        };
        assert!(tensor_from_proto(&p, None).is_err(), "4 int4 need 2 bytes");
        // Float8 E5M2 patterns in int32_data: 1.0, -2.0, +inf.
        let p = TensorProto {
            dims: vec![3],
            data_type: Some(19),
            int32_data: vec![0x3c, 0xc0, 0x7c],
            ..Default::default()
        };
        let t = tensor_from_proto(&p, None).unwrap();
        assert_eq!(t.dtype(), DType::F8E5M2);
        assert_eq!(t.as_slice::<F8E5M2>().unwrap()[1], F8E5M2(0xc0));
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.0, f64::INFINITY]);
    }

    #[test]
    fn strings_from_string_data() {
        let mut p = TensorProto {
            dims: vec![2],
            data_type: Some(8),
            string_data: vec![b"abc".to_vec(), "\u{7684}".as_bytes().to_vec()],
            ..Default::default()
        };
        let t = tensor_from_proto(&p, None).unwrap();
        let got: Vec<&str> = t
            .as_slice::<Str>()
            .unwrap()
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(got, ["abc", "\u{7684}"]);
        p.string_data.push(vec![0xff]);
        p.dims = vec![3];
        assert!(tensor_from_proto(&p, None).is_err(), "invalid UTF-8");
        p.string_data.pop();
        assert!(
            tensor_from_proto(&p, None).is_err(),
            "2 strings for 3 elements"
        );
    }

    #[test]
    fn external_data_in_model_folder() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = [3i64, 4, 5].iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.path().join("w.bin"), [vec![0u8; 8], bytes].concat()).unwrap();
        let kv = |k: &str, v: &str| crate::proto::StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v.into()),
        };
        let mut p = TensorProto {
            dims: vec![3],
            data_type: Some(7),
            data_location: Some(DataLocation::External as i32),
            external_data: vec![
                kv("location", "w.bin"),
                kv("offset", "8"),
                kv("length", "24"),
            ],
            ..Default::default()
        };
        let t = tensor_from_proto(&p, Some(dir.path())).unwrap();
        assert_eq!(t.as_slice::<i64>().unwrap(), &[3, 4, 5]);
        p.external_data[0] = kv("location", "../w.bin");
        assert!(tensor_from_proto(&p, Some(dir.path())).is_err());
        p.external_data[0] = kv("location", "w.bin");
        p.dims = vec![4];
        assert!(
            tensor_from_proto(&p, Some(dir.path())).is_err(),
            "declared length mismatches shape"
        );
    }
}
