//! Bytes → ModelProto → hidet graph (operator construction and shape inference included).
//! Any panic, hang or huge allocation is a bug: the importer must answer with an error.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = hidet_onnx::decode_model(data) {
        let _ = hidet_onnx::import_model(&model, None, hidet_graph::Registry::global());
    }
});
