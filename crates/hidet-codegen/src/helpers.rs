//! Helper functions shared by all dialects (floor division and modulo).

use crate::dialect::{Dialect, Uses};
use crate::error::Unsupported;
use hidet_ir::dtype::{DataType, ScalarType};

/// Requires the floor division (`is_div`) or floor modulo helper for the
/// signed integer type `dtype` and returns its name. Types narrower than
/// 32 bits use the `i32` helper (C promotes them to `int` anyway).
pub fn floor_div_mod(
    dialect: &dyn Dialect,
    is_div: bool,
    dtype: DataType,
    uses: &mut Uses,
) -> Result<String, Unsupported> {
    let width = match dtype.scalar {
        ScalarType::I8 | ScalarType::I16 | ScalarType::I32 => DataType::I32,
        ScalarType::I64 => DataType::I64,
        other => {
            return Err(Unsupported::new(format!(
                "floor division/modulo helper for {other}"
            )))
        }
    };
    let ty = dialect.value_type(width, uses)?;
    let q = dialect.helper_qualifier();
    let name = format!(
        "hidet_floor{}_{}",
        if is_div { "div" } else { "mod" },
        width.scalar.name()
    );
    uses.require_helper(&name, || {
        if is_div {
            format!(
                "/* floor(a / b); requires b != 0 */\n\
                 {q} {ty} {name}({ty} a, {ty} b) {{\n    \
                 {ty} q = a / b;\n    \
                 return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n}}"
            )
        } else {
            format!(
                "/* a - floor(a / b) * b, with the sign of b; requires b != 0 */\n\
                 {q} {ty} {name}({ty} a, {ty} b) {{\n    \
                 {ty} r = a % b;\n    \
                 return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}}"
            )
        }
    });
    Ok(name)
}
