//! Finding the CUDA tools that ship in PyPI wheels (NVRTC, `ptxas`, headers)
//! inside a Python virtual environment.
//!
//! Virtual environments are searched in this order:
//! 1. `$VIRTUAL_ENV` (an activated environment),
//! 2. `.venv` of this workspace (where `scripts/setup_python.sh` creates it),
//! 3. `.venv` in the current directory and each of its ancestors.

use std::path::{Path, PathBuf};

/// The virtual environment roots to search, in order, without duplicates.
/// Only directories that exist are returned.
pub fn venv_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        if !v.is_empty() {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv"));
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(|d| d.join(".venv")));
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for root in roots {
        let Ok(canonical) = root.canonicalize() else {
            continue;
        };
        if canonical.is_dir() && !unique.contains(&canonical) {
            unique.push(canonical);
        }
    }
    unique
}

/// `site-packages` directories of a virtual environment (`lib/python3*/site-packages`).
fn site_packages(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join("lib")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Every existing `<site-packages>/<relative>` in the searched virtual
/// environments, in search order. `searched` receives a description of each
/// place looked at, for error messages.
pub fn in_site_packages(relative: &str, searched: &mut Vec<String>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let roots = venv_roots();
    if roots.is_empty() {
        searched.push(format!(
            "<no .venv found>/lib/python3*/site-packages/{relative}"
        ));
    }
    for root in roots {
        let sites = site_packages(&root);
        if sites.is_empty() {
            searched.push(format!(
                "{}/lib/python3*/site-packages/{relative}",
                root.display()
            ));
        }
        for site in sites {
            let path = site.join(relative);
            searched.push(path.display().to_string());
            if path.exists() {
                found.push(path);
            }
        }
    }
    found
}

/// Like [`in_site_packages`] for several relative paths: every existing
/// `<site-packages>/<relative>`, environment by environment (in search order), and within
/// one environment in the order of `relatives`.
pub fn in_site_packages_each(relatives: &[&str], searched: &mut Vec<String>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let roots = venv_roots();
    if roots.is_empty() {
        for relative in relatives {
            searched.push(format!(
                "<no .venv found>/lib/python3*/site-packages/{relative}"
            ));
        }
    }
    for root in roots {
        let sites = site_packages(&root);
        if sites.is_empty() {
            searched.push(format!(
                "{}/lib/python3*/site-packages/{{{}}}",
                root.display(),
                relatives.join(",")
            ));
        }
        for site in sites {
            for relative in relatives {
                let path = site.join(relative);
                searched.push(path.display().to_string());
                if path.exists() {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// Every file called `name` in a directory of `$PATH`, in order.
pub fn in_path(name: &str) -> Vec<PathBuf> {
    let Some(path) = std::env::var_os("PATH") else {
        return Vec::new();
    };
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .filter(|p| p.is_file())
        .collect()
}
