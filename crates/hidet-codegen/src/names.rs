//! C identifiers for IR variables.

use hidet_ir::expr::Var;
use std::collections::{HashMap, HashSet};

/// C keywords and names the generated code or its headers use, which a
/// variable must never shadow.
const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "half",
    "args",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "asm",
    "class",
    "new",
    "delete",
    "this",
    "template",
    "namespace",
    "operator",
    "private",
    "public",
    "protected",
    "virtual",
    "NULL",
    "nullptr",
    "abs",
    "min",
    "max",
    "exp",
    "log",
    "sqrt",
    "fma",
    "pow",
];

/// Whether `s` is a valid C identifier that the generated code may define
/// (not a keyword, not starting with a reserved `hidet_`/`__` prefix).
pub fn is_valid_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&s)
        && !s.starts_with("hidet_")
        && !s.starts_with("__")
}

/// Gives each variable of one function a distinct, readable C identifier
/// derived from its name hint; reserved names get a `v_` prefix and clashes
/// a numeric suffix. `taken` names (functions of the module) are avoided.
#[derive(Debug, Default)]
pub struct NameTable {
    by_var: HashMap<Var, String>,
    used: HashSet<String>,
}

impl NameTable {
    /// A table in which the names in `taken` are already in use.
    pub fn with_taken<'a>(taken: impl IntoIterator<Item = &'a str>) -> NameTable {
        NameTable {
            by_var: HashMap::new(),
            used: taken.into_iter().map(str::to_string).collect(),
        }
    }

    /// The identifier of `var`, allocating one on first use.
    pub fn name(&mut self, var: &Var) -> String {
        if let Some(n) = self.by_var.get(var) {
            return n.clone();
        }
        let mut base: String = var
            .name()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !is_valid_identifier(&base) {
            base = format!("v_{base}");
        }
        let mut candidate = base.clone();
        let mut k = 1;
        while self.used.contains(&candidate) || !is_valid_identifier(&candidate) {
            candidate = format!("{base}_{k}");
            k += 1;
        }
        self.used.insert(candidate.clone());
        self.by_var.insert(var.clone(), candidate.clone());
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hidet_ir::dtype::DataType;

    #[test]
    fn distinct_vars_get_distinct_valid_names() {
        let mut t = NameTable::with_taken(["kernel"]);
        let a = Var::new("i", DataType::I32);
        let b = Var::new("i", DataType::I32);
        let c = Var::new("int", DataType::I32);
        let d = Var::new("kernel", DataType::I32);
        let e = Var::new("", DataType::I32);
        let names = [t.name(&a), t.name(&b), t.name(&c), t.name(&d), t.name(&e)];
        assert_eq!(t.name(&a), names[0]);
        let set: HashSet<_> = names.iter().collect();
        assert_eq!(set.len(), names.len());
        assert!(names.iter().all(|n| is_valid_identifier(n)), "{names:?}");
    }
}
