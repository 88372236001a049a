//! The C compiler driver: finds the system compiler and turns a C source
//! file into a shared library.

use crate::error::CpuError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static INVOCATIONS: AtomicU64 = AtomicU64::new(0);

/// A C compiler: the program, any leading arguments that came with it (as in
/// `CC="ccache gcc"`), and the first line of its `--version` output.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Compiler {
    /// The program, resolved through `PATH` to an absolute path when found there.
    pub program: PathBuf,
    /// Arguments placed before any others on every invocation.
    pub leading_args: Vec<String>,
    /// The first line of `program --version`.
    pub version: String,
}

impl Compiler {
    /// The system compiler: the `CC` environment variable if set and
    /// non-empty, else `cc`. Detected once per process; later calls return
    /// the same compiler (or the same error).
    pub fn system() -> Result<&'static Compiler, CpuError> {
        static SYSTEM: OnceLock<Result<Compiler, (String, std::io::ErrorKind, String)>> =
            OnceLock::new();
        let detected = SYSTEM.get_or_init(|| {
            let command = std::env::var("CC")
                .ok()
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| "cc".to_string());
            Compiler::from_command(&command).map_err(|e| match e {
                CpuError::NoCompiler { program, source } => {
                    (program, source.kind(), source.to_string())
                }
                other => (command, std::io::ErrorKind::Other, other.to_string()),
            })
        });
        detected
            .as_ref()
            .map_err(|(program, kind, message)| CpuError::NoCompiler {
                program: program.clone(),
                source: std::io::Error::new(*kind, message.clone()),
            })
    }

    /// The compiler named by a command line such as `gcc` or `ccache clang`:
    /// runs it with `--version`. Fails when it cannot be started or does not
    /// answer `--version` successfully.
    pub fn from_command(command: &str) -> Result<Compiler, CpuError> {
        let mut words = command.split_whitespace().map(str::to_string);
        let program = words.next().unwrap_or_else(|| "cc".to_string());
        let leading_args: Vec<String> = words.collect();
        let no_compiler = |source: std::io::Error| CpuError::NoCompiler {
            program: program.clone(),
            source,
        };
        let output = Command::new(&program)
            .args(&leading_args)
            .arg("--version")
            .output()
            .map_err(no_compiler)?;
        if !output.status.success() {
            return Err(no_compiler(std::io::Error::other(format!(
                "`{program} --version` exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ))));
        }
        let version = String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        Ok(Compiler {
            program: resolve_in_path(&program),
            leading_args,
            version,
        })
    }

    /// Compiles the C file `source` into `output` with `flags` (which must
    /// include what makes a shared library, e.g. `-shared -fPIC`) and links
    /// the math library. On failure the error carries the compiler's stderr
    /// and `source`'s path; `output` may then be absent or partial.
    pub fn compile(&self, source: &Path, output: &Path, flags: &[String]) -> Result<(), CpuError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.leading_args)
            .args(flags)
            .arg("-o")
            .arg(output)
            .arg(source)
            .arg("-lm");
        let command = format!("{cmd:?}");
        INVOCATIONS.fetch_add(1, Ordering::Relaxed);
        let result = cmd.output().map_err(|e| CpuError::NoCompiler {
            program: self.program.display().to_string(),
            source: e,
        })?;
        if result.status.success() {
            Ok(())
        } else {
            Err(CpuError::CompileFailed {
                status: result.status.to_string(),
                command,
                stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
                source_path: source.to_path_buf(),
            })
        }
    }

    /// A string identifying this compiler for cache keys: program path,
    /// leading arguments and version.
    pub fn identity(&self) -> String {
        format!(
            "{}\u{1f}{}\u{1f}{}",
            self.program.display(),
            self.leading_args.join(" "),
            self.version
        )
    }
}

/// How many times this process has invoked a C compiler to build a library.
pub fn compiler_invocations() -> u64 {
    INVOCATIONS.load(Ordering::Relaxed)
}

fn resolve_in_path(program: &str) -> PathBuf {
    let as_path = Path::new(program);
    if as_path.components().count() > 1 {
        return std::fs::canonicalize(as_path).unwrap_or_else(|_| as_path.to_path_buf());
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| as_path.to_path_buf())
}
