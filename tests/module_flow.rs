//! Data flows one way: configuration is data below what it configures, the algorithm modules
//! know nothing of the GPU, and the backend knows nothing above it. Compute has rooms of its
//! own, in floors: `pipelines/` (compile, caches, error scopes) at the bottom, below
//! `context.rs`; `step/` (a recorded step) on it; `context.rs` above both,
//! never naming an array, a sequence or an op; `compute/` (what users call) above the context;
//! `ops/` (the library's ops) on top, named by nothing but the crate root; `kernels.rs`, the
//! public facade, named by nothing inside the crate. This test reads the sources and fails when
//! a file of one of those modules names a module it must not (`use crate::...`, `crate::...`
//! paths in code, `super::` paths that climb to the crate root), so an import against the
//! flow cannot come back unnoticed.

use std::path::{Path, PathBuf};

/// A rule: files under `dir` (relative to `src/`) must not name the top-level modules of any
/// of these lists.
struct Rule {
    dir: &'static str,
    forbidden: &'static [&'static [&'static str]],
    why: &'static str,
}

/// The modules that hold or drive a device: above configuration, the backend and the pure
/// algorithm modules alike.
const DEVICE_USERS: &[&str] = &[
    "transfer",
    "context",
    "kernels",
    "array",
    "submission",
    "profile",
    "compute",
    "ops",
    "pipelines",
    "step",
    "view",
    "donated",
    "devices",
    "sharding",
    "backprop",
    "distributed",
    "app_work",
];

/// What is above the pipeline plumbing: everything that holds an array or a context, records
/// or submits work.
const ABOVE_PIPELINES: &[&str] = &[
    "context",
    "array",
    "view",
    "donated",
    "devices",
    "transfer",
    "submission",
    "step",
    "compute",
    "ops",
    "kernels",
    "profile",
    "sharding",
    "backprop",
    "distributed",
    "remat",
    "app_work",
];

/// What is above `context.rs`: arrays (which know their context), users' compute, the
/// library's ops, the public facade, and what is built on them.
const ABOVE_CONTEXT: &[&str] = &[
    "app_work",
    "array",
    "view",
    "donated",
    "compute",
    "ops",
    "kernels",
    "sharding",
    "backprop",
    "distributed",
];

/// The library's ops and the public facade: named by the crate root alone.
const TOP: &[&str] = &[
    "ops",
    "kernels",
    "sharding",
    "backprop",
    "distributed",
    "app_work",
];

/// What the pure modules must not name besides [`DEVICE_USERS`]: the backend, configuration and
/// the crate-wide error (they have their own).
const PURE_ALSO_FORBIDS: &[&str] = &["backend", "config", "error"];

const RULES: &[Rule] = &[
    Rule {
        dir: "config",
        forbidden: &[DEVICE_USERS, &["backend"]],
        why: "configuration is data below what it configures (config -> context -> transfer)",
    },
    Rule {
        dir: "arena",
        forbidden: &[DEVICE_USERS, PURE_ALSO_FORBIDS],
        why: "the arena's algorithm is pure CPU (offsets, sizes and ids, no GPU types)",
    },
    Rule {
        dir: "memplan",
        forbidden: &[DEVICE_USERS, PURE_ALSO_FORBIDS],
        why: "the memory-type policy is a pure function of a memory table",
    },
    Rule {
        dir: "remat",
        forbidden: &[DEVICE_USERS, PURE_ALSO_FORBIDS],
        why: "the checkpointing planner is pure CPU",
    },
    Rule {
        dir: "backend",
        forbidden: &[DEVICE_USERS, &["config", "remat"]],
        why: "the backend (raw handles and pointers: regions, mapped memory, files, MPI buffers) imports nothing above it",
    },
    Rule {
        dir: "pipelines",
        forbidden: &[ABOVE_PIPELINES, &["config"]],
        why: "pipeline plumbing is below compute/, ops/ and context.rs: it knows sources, devices and pipelines, never arrays or contexts",
    },
    Rule {
        dir: "step",
        forbidden: &[ABOVE_PIPELINES],
        why: "a recorded step knows buffers, byte ranges and its compiled kernel, nothing above",
    },
    Rule {
        dir: "submission",
        forbidden: &[ABOVE_PIPELINES],
        why: "submission numbers are below everything that submits",
    },
    Rule {
        dir: "devices",
        forbidden: &[ABOVE_PIPELINES],
        why: "listing and choosing adapters is below the context that opens one",
    },
    Rule {
        dir: "context",
        forbidden: &[ABOVE_CONTEXT],
        why: "the only arrows into context.rs come from above it: arrays, compute and ops know their context, not the reverse",
    },
    Rule {
        dir: "array",
        forbidden: &[&["view", "donated", "compute", "ops", "kernels", "transfer"]],
        why: "an array knows its context and its memory, not the views, ops or transfers over it",
    },
    Rule {
        dir: "transfer",
        forbidden: &[TOP],
        why: "transfers are below the library's ops and the kernels facade",
    },
    Rule {
        dir: "compute",
        forbidden: &[TOP],
        why: "users' compute is below the library's ops (which record into a Sequence) and behind the kernels facade",
    },
    Rule {
        dir: "ops",
        forbidden: &[&["kernels", "sharding", "backprop", "distributed"]],
        why: "the library's ops are a leaf: built on compute/ and pipelines/, behind the kernels facade",
    },
    Rule {
        dir: "profile",
        forbidden: &[TOP, &["compute"]],
        why: "profiling reads contexts and arrays, not compute or ops",
    },
];

/// External GPU crates the pure modules must not name either.
const GPU_CRATES: &[&str] = &["wgpu", "ash", "gpu_allocator"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir` (or `dir.rs` itself), sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let single = dir.with_extension("rs");
    if single.is_file() {
        files.push(single);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The code of a file without comments (line, doc and block comments) and without the text
/// of string literals, so that docs mentioning a module do not count.
fn code_only(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut chars = source.chars().peekable();
    let mut block_depth = 0usize;
    while let Some(c) = chars.next() {
        if block_depth > 0 {
            match (c, chars.peek()) {
                ('*', Some('/')) => {
                    chars.next();
                    block_depth -= 1;
                }
                ('/', Some('*')) => {
                    chars.next();
                    block_depth += 1;
                }
                ('\n', _) => out.push('\n'),
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            // A raw string: `r"..."`, `r#"..."#`, ... up to the quote and as many hashes.
            ('r', Some('"' | '#')) if !out.ends_with(|p: char| p.is_alphanumeric() || p == '_') => {
                let mut hashes = 0;
                while chars.peek() == Some(&'#') {
                    chars.next();
                    hashes += 1;
                }
                if chars.next() != Some('"') {
                    out.push('r'); // `r#ident`, not a string
                    continue;
                }
                out.push_str("\"\"");
                let mut run: Option<usize> = None;
                for c in chars.by_ref() {
                    run = match (c, run) {
                        ('"', _) => Some(0),
                        ('#', Some(n)) => Some(n + 1),
                        _ => None,
                    };
                    if run == Some(hashes) {
                        break;
                    }
                }
            }
            // The character literal of a double quote.
            ('\'', Some('"')) => {
                chars.next();
                chars.next();
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                block_depth = 1;
            }
            ('"', _) => {
                out.push_str("\"\"");
                let mut escaped = false;
                for c in chars.by_ref() {
                    match c {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        '"' => break,
                        _ => {}
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The module path of a file under `src/` (`src/arena/bins.rs` -> `["arena", "bins"]`,
/// `src/arena/mod.rs` -> `["arena"]`).
fn module_path(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src()).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn identifier_at(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The top-level modules of the crate that `code` (of the module at `path`) names: through
/// `crate::x`, `crate::{x, y::z}` and `super::` chains that reach the crate root.
fn named_modules(code: &str, path: &[String]) -> Vec<String> {
    let mut named = Vec::new();
    let take_after_root = |rest: &str, named: &mut Vec<String>| {
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split on commas outside nested braces.
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.push(identifier_at(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 || c != '{' {
                    item.push(c);
                }
            }
            named.push(identifier_at(item.trim()));
        } else {
            named.push(identifier_at(rest));
        }
    };
    for (at, _) in code.match_indices("crate::") {
        // Not part of a longer identifier (`my_crate::`).
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        take_after_root(&code[at + "crate::".len()..], &mut named);
    }
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // counted with the first `super::` of its chain
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs >= path.len() {
            take_after_root(rest, &mut named);
        }
    }
    named.retain(|n| !n.is_empty() && n != "self");
    named
}

/// Violations of `rule` in the sources of the crate: `file: names module (why)`.
fn violations(rule: &Rule) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(&src().join(rule.dir)) {
        let source = std::fs::read_to_string(&file).expect("a readable source file");
        let shown = file
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&file);
        let code = code_only(&source);
        for module in named_modules(&code, &module_path(&file)) {
            if rule
                .forbidden
                .iter()
                .any(|list| list.contains(&module.as_str()))
            {
                found.push(format!(
                    "{} names crate::{module} ({})",
                    shown.display(),
                    rule.why
                ));
            }
        }
        if rule.forbidden.contains(&PURE_ALSO_FORBIDS) {
            for gpu in GPU_CRATES {
                let path = format!("{gpu}::");
                let uses = code.match_indices(&path).any(|(at, _)| {
                    !code[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                });
                if uses {
                    found.push(format!("{} names {gpu} ({})", shown.display(), rule.why));
                }
            }
        }
    }
    found
}

#[test]
fn no_module_names_a_module_against_the_flow() {
    let mut found = Vec::new();
    for rule in RULES {
        assert!(
            !rust_files(&src().join(rule.dir)).is_empty(),
            "no sources found for src/{}",
            rule.dir
        );
        found.extend(violations(rule));
    }
    assert!(
        found.is_empty(),
        "imports against the flow:\n{}",
        found.join("\n")
    );
}

/// Every file of the crate but `lib.rs` (and the ops' own files, for `ops`): none may name the
/// library's ops or the public `kernels` facade, which only re-exports.
#[test]
fn only_the_crate_root_names_the_ops_and_the_kernels_facade() {
    let mut found = Vec::new();
    for file in rust_files(&src()) {
        let path = module_path(&file);
        if path.is_empty() {
            continue; // lib.rs
        }
        let source = std::fs::read_to_string(&file).expect("a readable source file");
        for module in named_modules(&code_only(&source), &path) {
            let own = path.first() == Some(&module);
            if (module == "ops" || module == "kernels") && !own {
                found.push(format!(
                    "{} names crate::{module} (only the crate root names the ops and the kernels facade)",
                    file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "imports of the top:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_every_way_of_naming_a_module_and_ignores_docs() {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let named = |code: &str, p: &[&str]| named_modules(&code_only(code), &path(p));
    assert_eq!(
        named("use crate::transfer::TransferGuardLevels;", &["config"]),
        ["transfer"]
    );
    assert_eq!(
        named(
            "use crate::{error::{Error, Result}, context::Context};",
            &["config"]
        ),
        ["error", "context"]
    );
    assert_eq!(
        named("let x = crate::profile::DEFAULT;", &["config", "env"]),
        ["profile"]
    );
    assert_eq!(
        named("use super::super::kernels::X;", &["config", "env"]),
        ["kernels"]
    );
    assert_eq!(named("use super::context::X;", &["config"]), ["context"]);
    // Inside the module: not the crate root.
    assert!(named("use super::validate::X;", &["config", "env"]).is_empty());
    // Docs, comments and strings do not count.
    assert!(named(
        "//! see crate::context\n/// [`x`](crate::kernels::y)\n/* crate::transfer */ let s = \"crate::array\";",
        &["config"]
    )
    .is_empty());
    assert!(named("use my_crate::context::X;", &["config"]).is_empty());
    assert!(named(
        "let s = r#\"a \"quoted\" crate::context\"#; let q = '\"'; let t = \"crate::kernels\";",
        &["config"]
    )
    .is_empty());
    assert_eq!(
        named("let q = '\"'; use crate::array::X;", &["config"]),
        ["array"]
    );
}
