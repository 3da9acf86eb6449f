//! Finding the `canopy` binary under test.
//!
//! Cargo tells only canopy-cli's own tests where the binary is (`CARGO_BIN_EXE_canopy`), but it
//! builds the binary for them whenever they are built, and `cargo test --workspace` builds every
//! test before it runs any. So the binary lies in the profile directory above this test
//! executable (`target/debug/deps/the_test` -> `target/debug/canopy`). `cargo test -p
//! canopy-integration-tests` alone does not rebuild it: run `cargo build -p canopy-cli` first, or
//! test both packages. A binary older than one of its sources (as listed in the dep-info file
//! cargo writes beside it) is refused rather than tested. `CANOPY_BIN` names another binary (say,
//! a release build for the benchmark).

use std::path::{Path, PathBuf};

/// The `canopy` binary to test: `$CANOPY_BIN`, else the one built next to this executable,
/// provided it is newer than every source file.
pub fn canopy_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("CANOPY_BIN") {
        return PathBuf::from(binary);
    }
    let executable = std::env::current_exe().unwrap();
    let name = format!("canopy{}", std::env::consts::EXE_SUFFIX);
    // Tests run from `<profile>/deps`, examples from `<profile>/examples`.
    let binary = executable
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(&name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no {name} binary near {}: build it with `cargo build -p canopy-cli` (the same \
                 profile), or run `cargo test --workspace`, which builds it",
                executable.display()
            )
        });
    if let Some(newer) = source_newer_than(&binary) {
        panic!(
            "{} is older than {}: rebuild it with `cargo build -p canopy-cli` (or run `cargo test \
             --workspace`)",
            binary.display(),
            newer.display()
        );
    }
    binary
}

/// A source file of `binary` modified after it, going by cargo's `binary.d` (absent: none).
fn source_newer_than(binary: &Path) -> Option<PathBuf> {
    let built = std::fs::metadata(binary).and_then(|metadata| metadata.modified()).ok()?;
    let dep_info = std::fs::read_to_string(binary.with_extension("d")).ok()?;
    dependencies(&dep_info).into_iter().map(PathBuf::from).find(|source| {
        std::fs::metadata(source).and_then(|metadata| metadata.modified()).is_ok_and(|at| at > built)
    })
}

/// The prerequisites of a Makefile-style dep-info file (`target: a b\ c`), spaces unescaped.
fn dependencies(dep_info: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = dep_info.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => words.extend((!word.is_empty()).then(|| std::mem::take(&mut word))),
            c => word.push(c),
        }
    }
    words.extend((!word.is_empty()).then_some(word));
    // The first word is the target, ending in ':'.
    words.into_iter().skip_while(|word| !word.ends_with(':')).skip(1).collect()
}

#[cfg(test)]
mod tests {
    use super::dependencies;

    #[test]
    fn dep_info_lists_the_sources_after_the_target() {
        let dep_info = "/t/debug/canopy: /src/main.rs /my\\ dir/lib.rs\n";
        assert_eq!(dependencies(dep_info), ["/src/main.rs", "/my dir/lib.rs"]);
    }
}
