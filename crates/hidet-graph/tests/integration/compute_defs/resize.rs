//! Resize and Upsample: nearest (every rounding mode) and linear, under every coordinate
//! transform that has a definition, by `scales` and by `sizes`, upsampling and downsampling
//! by integer and fractional factors (sizes that are no multiple of the input: 7 → 12,
//! 12 → 5), 1-D to 3-D, f32/f16/f64 and integer data for nearest; and the cases that stay on
//! the host (cubic, antialias, `tf_crop_and_resize`, a scale that is no ratio of small
//! integers).
//!
//! Tolerance: the reference computes in f64; linear definitions weigh in the data's math type
//! (`rem / c` weights, at most 8 taps), so f32 outputs are compared within
//! `1e-5 + 1e-5·|want|`; nearest definitions pick the reference's elements exactly.

use super::*;

/// Every operator of the family; each must appear in [`resize_cases`].
pub(super) const RESIZE_OPS: &[&str] = &["Resize", "Upsample"];

fn s(v: &str) -> Attribute {
    Attribute::String(v.into())
}

fn f32s(v: &[f32]) -> In {
    In::Value(Tensor::new(vec![v.len()], v.to_vec()).expect("length matches the shape"))
}

fn resize(x: In, scales: Option<&[f32]>, sizes: Option<&[i64]>) -> Case {
    let scales = scales.map_or(In::Absent, f32s);
    let sizes = sizes.map_or(In::Absent, |v| i64s(&[v.len()], v));
    case("Resize", vec![x, In::Absent, scales, sizes]).opset(19)
}

pub(super) fn resize_cases() -> Vec<Case> {
    let mut c = Vec::new();
    let coords = [
        "half_pixel",
        "pytorch_half_pixel",
        "align_corners",
        "asymmetric",
        "half_pixel_symmetric",
    ];
    // Nearest: every rounding mode under every transform, up by 2 and by sizes 7 → 12, down
    // by sizes 12 → 5.
    for coord in coords {
        for nearest in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] {
            for (shape, scales, sizes) in [
                (vec![2, 3, 5, 7], Some(&[1.0f32, 1.0, 2.0, 2.0][..]), None),
                (vec![1, 2, 7, 12], None, Some(&[1i64, 2, 12, 5][..])),
            ] {
                c.push(
                    resize(f(F32, &shape), scales, sizes)
                        .attr("mode", s("nearest"))
                        .attr("coordinate_transformation_mode", s(coord))
                        .attr("nearest_mode", s(nearest)),
                );
            }
        }
        // Linear: up by 2 and by 1.5 (scales), and by sizes 7 → 12 and 12 → 5.
        for (shape, scales, sizes) in [
            (vec![2, 3, 5, 7], Some(&[1.0f32, 1.0, 2.0, 2.0][..]), None),
            (vec![1, 2, 6, 4], Some(&[1.0f32, 1.0, 1.5, 0.5][..]), None),
            (vec![1, 2, 7, 12], None, Some(&[1i64, 2, 12, 5][..])),
        ] {
            c.push(
                resize(f(F32, &shape), scales, sizes)
                    .attr("mode", s("linear"))
                    .attr("coordinate_transformation_mode", s(coord)),
            );
        }
    }
    // Other dtypes and ranks: f16 and f64 linear, integers and f16 nearest, trilinear, 1-D,
    // resized axes chosen with `axes`.
    c.push(
        resize(f(F16, &[1, 2, 5, 6]), Some(&[1.0, 1.0, 2.0, 2.0]), None).attr("mode", s("linear")),
    );
    c.push(resize(f(F64, &[1, 2, 5, 6]), None, Some(&[1, 2, 9, 4])).attr("mode", s("linear")));
    c.push(resize(
        int(I32, &[1, 2, 5, 6], -90, 90),
        Some(&[1.0, 1.0, 3.0, 2.0]),
        None,
    ));
    c.push(resize(int(U8, &[2, 3, 4], 1, 250), None, Some(&[2, 7, 3])));
    c.push(resize(
        f(F16, &[1, 2, 5, 6]),
        Some(&[1.0, 1.0, 0.5, 0.5]),
        None,
    ));
    c.push(
        resize(
            f(F32, &[1, 2, 3, 4, 5]),
            Some(&[1.0, 1.0, 2.0, 2.0, 2.0]),
            None,
        )
        .attr("mode", s("linear"))
        .attr("coordinate_transformation_mode", s("align_corners")),
    );
    c.push(resize(f(F32, &[9]), None, Some(&[20])).attr("mode", s("linear")));
    c.push(
        resize(f(F32, &[2, 3, 5, 7]), None, Some(&[10, 3]))
            .attr("mode", s("linear"))
            .attr("axes", ints(&[2, 1])),
    );
    // Upsample 9 and Resize 10: asymmetric, floor (element repetition).
    c.push(
        case(
            "Upsample",
            vec![f(F32, &[1, 2, 3, 4]), f32s(&[1.0, 1.0, 2.0, 3.0])],
        )
        .opset(9),
    );
    c.push(
        case(
            "Resize",
            vec![f(F32, &[1, 2, 3, 4]), f32s(&[1.0, 1.0, 2.0, 2.0])],
        )
        .opset(10)
        .attr("mode", s("linear")),
    );
    // On the host.
    c.push(
        resize(f(F32, &[1, 2, 5, 6]), Some(&[1.0, 1.0, 2.0, 2.0]), None)
            .attr("mode", s("cubic"))
            .none("cubic"),
    );
    c.push(
        resize(f(F32, &[1, 2, 8, 8]), Some(&[1.0, 1.0, 0.5, 0.5]), None)
            .attr("mode", s("linear"))
            .attr("antialias", int_attr(1))
            .none("antialias"),
    );
    c.push(
        case(
            "Resize",
            vec![
                f(F32, &[1, 1, 4, 4]),
                f32s(&[0.0, 0.0, 0.1, 0.2, 1.0, 1.0, 0.9, 1.3]),
                In::Absent,
                i64s(&[4], &[1, 1, 3, 3]),
            ],
        )
        .opset(19)
        .attr("mode", s("linear"))
        .attr("coordinate_transformation_mode", s("tf_crop_and_resize"))
        .none("tf_crop_and_resize"),
    );
    c.push(
        resize(
            f(F32, &[1, 1, 4, 4]),
            Some(&[1.0, 1.0, 1.2345679, 1.0]),
            None,
        )
        .attr("mode", s("linear"))
        .none("a scale that is no ratio of small integers"),
    );
    c
}
