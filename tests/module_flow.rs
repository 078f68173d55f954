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
//!
//! Inside and across modules the same one-way flow holds between files: a graph with an edge
//! A -> B when file A names an item of file B by path (`crate::`, `super::`, `self::`, or a
//! child's name in its parent), each path resolved to the longest prefix of its segments that
//! is a file, must have no cycle. A `mod child;` declaration alone is no edge; a parent's
//! `pub use child::X` or `child::f()` is an edge parent -> child; code in a file's own inline
//! modules (`#[cfg(test)] mod tests`) counts as that file. The rules, and why, are in the comment
//! that opens the file graph below; `no_import_cycle_between_files` lists every cycle with one
//! path per edge.

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
        forbidden: &[ABOVE_CONTEXT, &["transfer", "profile"]],
        why: "the only arrows into context.rs come from above it: arrays, compute, ops, transfers and the profile know their context, not the reverse",
    },
    Rule {
        dir: "host_link",
        forbidden: &[ABOVE_CONTEXT, &["context", "transfer", "profile"]],
        why: "the host link (staging, transfer counters) is held by the context and below it",
    },
    Rule {
        dir: "trace",
        forbidden: &[ABOVE_CONTEXT, &["context", "transfer", "profile", "host_link"]],
        why: "what a context records (timeline, array info, labels) is below the context that writes it and the profile that reads it",
    },
    Rule {
        dir: "array",
        forbidden: &[&["view", "donated", "compute", "ops", "kernels", "transfer", "profile"]],
        why: "an array knows its context and its memory, not the views, ops or transfers over it",
    },
    Rule {
        dir: "transfer",
        forbidden: &[TOP, &["compute"]],
        why: "transfers are below users' compute, the library's ops and the kernels facade",
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

// ---------------------------------------------------------------------------------------------
// Import cycles between files.
//
// The layer rules above compare top-level modules; inside a module the same one-way flow holds
// between its files. The graph below has one node per file of `src/` and an edge A -> B when
// the code of A (comments and strings stripped) names an item of B by path:
//
// - `crate::a::b::c`, `super::...` and `self::...` paths, inside `use` trees too
//   (`use crate::{a::X, b::{c::Y, self}}`), and paths that start with the name of a child file
//   of A's module (`pub use child::X`, `child::f()` in a parent, as Rust 2018 allows without
//   `self::`). `super` and `self` are taken from the module the path is written in, inline
//   modules (`mod tests { use super::*; }`) included.
// - A path resolves to the longest prefix of its segments that is a file: `src/a/b.rs`,
//   `src/a/b/mod.rs` or `src/a.rs` with its directory `src/a/`, and `src/lib.rs` for the crate
//   root (`crate::Error` is an edge to `lib.rs`: the item is named through the root's
//   re-export).
// - A `mod child;` declaration alone is not an edge: it only says where the child's file is.
// - Code inside a file's own inline modules (`#[cfg(test)] mod tests`, `mod model`) counts as
//   that file: a test that reaches back up is still an import the file's build depends on,
//   and fixing it costs no more than excusing it.
// - A name imported as a module (`use crate::arena::bins;`) is an edge to that module's file;
//   the paths written through such an alias later (`bins::Bins`) are not followed.
//
// A cycle is a strongly connected set of two or more files (Tarjan's algorithm); each is shown
// with its files and, for every edge between them, one path that makes it, so a reader knows
// which import to change.

/// One edge of the file graph: the path (as written, resolved to its absolute form) that made it.
#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    to: usize,
    path: String,
}

/// The files of the crate (relative to `src/`) and the edges between them.
#[derive(Debug)]
struct FileGraph {
    files: Vec<String>,
    edges: Vec<Edge>,
}

/// The module path of a file named relative to `src/` (`arena/bins.rs` -> `["arena", "bins"]`,
/// `arena/mod.rs` -> `["arena"]`, `lib.rs` -> `[]`).
fn module_path_of(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifier that starts at byte `at` of `code`, and where it ends.
fn ident_from(code: &str, at: usize) -> (&str, usize) {
    let len = code[at..]
        .char_indices()
        .find(|(_, c)| !is_ident_char(*c))
        .map_or(code.len() - at, |(i, _)| i);
    (&code[at..at + len], at + len)
}

fn skip_ws(code: &str, at: usize) -> usize {
    at + code[at..].len() - code[at..].trim_start().len()
}

/// The paths of the path or `use` tree that starts at byte `at` (`a::b::{c, d::e}` -> `a::b::c`,
/// `a::b::d::e`), each as its segments; `*` and generic arguments end a path.
fn paths_at(code: &str, at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut segments = prefix.to_vec();
    let mut at = skip_ws(code, at);
    loop {
        if code[at..].starts_with('{') {
            at += 1;
            loop {
                at = skip_ws(code, at);
                if code[at..].starts_with('}') {
                    return at + 1;
                }
                if code[at..].starts_with(',') {
                    at += 1;
                    continue;
                }
                if !code[at..].starts_with(|c: char| is_ident_char(c) || c == '{') {
                    // `*` or something this reader does not follow: skip to the next item.
                    let next = code[at..].find([',', '}']).map_or(code.len(), |i| at + i);
                    if next == at {
                        return at;
                    }
                    at = next;
                    continue;
                }
                at = paths_at(code, at, &segments, out);
                // Skip `as alias` and anything else up to the next item.
                let next = code[at..].find([',', '}']).map_or(code.len(), |i| at + i);
                at = next;
            }
        }
        let (ident, end) = ident_from(code, at);
        if ident.is_empty() {
            break;
        }
        // `{self, ..}` in a group names the group's prefix itself.
        if !(ident == "self" && !prefix.is_empty() && segments.len() == prefix.len()) {
            segments.push(ident.to_string());
        }
        at = end;
        let after = skip_ws(code, at);
        if code[after..].starts_with("::") {
            let next = skip_ws(code, after + 2);
            if code[next..].starts_with(|c: char| is_ident_char(c) || c == '{') {
                at = next;
                continue;
            }
        }
        break;
    }
    if segments.len() > prefix.len() || !prefix.is_empty() {
        out.push(segments);
    }
    at
}

/// The module each byte of `code` is written in, as the names of the inline modules
/// (`mod tests { .. }`) around it: a list of (start byte, inline path) changes.
fn inline_modules(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut changes = vec![(0, Vec::new())];
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\'' => {
                // A character literal (`'{'`, `'\''`): skip it so its brace does not count;
                // a lifetime (`'a`) has no closing quote two or three bytes on.
                if bytes.get(i + 2) == Some(&b'\'') {
                    i += 3;
                    continue;
                }
                if bytes.get(i + 1) == Some(&b'\\') {
                    if let Some(close) = code[i + 2..].find('\'') {
                        i += close + 3;
                        continue;
                    }
                }
            }
            b'{' => {
                depth += 1;
                // `mod name {`: the word before the brace is the name, `mod` before that.
                let before = code[..i].trim_end();
                let name_start = before
                    .rfind(|c: char| !is_ident_char(c))
                    .map_or(0, |p| p + 1);
                let name = &before[name_start..];
                let keyword = before[..name_start].trim_end();
                if !name.is_empty()
                    && keyword.ends_with("mod")
                    && !keyword[..keyword.len() - 3].ends_with(is_ident_char)
                {
                    stack.push((name.to_string(), depth));
                    changes.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
                }
            }
            b'}' => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                    changes.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        i += 1;
    }
    changes
}

/// The file graph of `sources`: (path relative to `src/`, source text) pairs.
fn file_graph(sources: &[(String, String)]) -> FileGraph {
    let files: Vec<String> = sources.iter().map(|(p, _)| p.clone()).collect();
    let modules: Vec<Vec<String>> = files.iter().map(|f| module_path_of(f)).collect();
    let file_of = |segments: &[String]| -> Option<usize> {
        (0..=segments.len())
            .rev()
            .find_map(|n| modules.iter().position(|m| m.as_slice() == &segments[..n]))
    };
    let mut edges: Vec<Edge> = Vec::new();
    for (from, (_, source)) in sources.iter().enumerate() {
        let code = code_only(source);
        let inline = inline_modules(&code);
        let own = &modules[from];
        let mut at = 0;
        while let Some(found) = code[at..].find("::") {
            let colons = at + found;
            at = colons + 2;
            // The first segment of the path: the identifier before `::`.
            let before = code[..colons].trim_end();
            let start = before
                .rfind(|c: char| !is_ident_char(c))
                .map_or(0, |p| p + 1);
            let first = &before[start..];
            if first.is_empty() {
                continue;
            }
            if code[..start].trim_end().ends_with("::") {
                continue; // not the start of its path
            }
            let mut module = own.clone();
            let inside = inline
                .iter()
                .rev()
                .find(|(change, _)| *change <= start)
                .map(|(_, m)| m.clone())
                .unwrap_or_default();
            module.extend(inside);
            let base: Vec<String> = match first {
                // `$crate::` in a macro is the crate root too.
                "crate" => Vec::new(),
                "super" | "self" => module.clone(),
                _ => {
                    let mut child = own.clone();
                    child.push(first.to_string());
                    if !modules.contains(&child) {
                        continue;
                    }
                    own.clone()
                }
            };
            let mut paths = Vec::new();
            let path_start = if first == "crate" { colons + 2 } else { start };
            // The `::`s inside this path or tree start no path of their own.
            at = at.max(paths_at(&code, path_start, &[], &mut paths));
            for written in paths {
                let mut absolute = base.clone();
                for segment in &written {
                    match segment.as_str() {
                        "super" => {
                            absolute.pop();
                        }
                        "self" | "crate" => {}
                        _ => absolute.push(segment.clone()),
                    }
                }
                let Some(to) = file_of(&absolute) else {
                    continue;
                };
                if to == from {
                    continue;
                }
                if !edges.iter().any(|e| e.from == from && e.to == to) {
                    let shown = if first == "crate" {
                        format!("crate::{}", written.join("::"))
                    } else {
                        written.join("::")
                    };
                    edges.push(Edge {
                        from,
                        to,
                        path: shown,
                    });
                }
            }
        }
    }
    FileGraph { files, edges }
}

/// The strongly connected sets of two or more files (Tarjan's algorithm), each sorted, in the
/// order of their first file.
fn file_cycles(graph: &FileGraph) -> Vec<Vec<usize>> {
    struct Tarjan {
        next: Vec<Vec<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        sets: Vec<Vec<usize>>,
    }
    impl Tarjan {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.counter);
            self.low[v] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for w in self.next[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    set.push(w);
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.sets.push(set);
                }
            }
        }
    }
    let n = graph.files.len();
    let mut next = vec![Vec::new(); n];
    for edge in &graph.edges {
        next[edge.from].push(edge.to);
    }
    let mut tarjan = Tarjan {
        next,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        sets: Vec::new(),
    };
    for v in 0..n {
        if tarjan.index[v].is_none() {
            tarjan.visit(v);
        }
    }
    let mut sets = tarjan.sets;
    sets.sort();
    sets
}

/// A cycle as a reader fixes it: its files, then each edge between them with the path that
/// makes it.
fn describe_cycle(graph: &FileGraph, set: &[usize]) -> String {
    let mut text = format!(
        "cycle of {} files: {}\n",
        set.len(),
        set.iter()
            .map(|&f| format!("src/{}", graph.files[f]))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for edge in &graph.edges {
        if set.contains(&edge.from) && set.contains(&edge.to) {
            text.push_str(&format!(
                "  src/{} -> src/{}: {}\n",
                graph.files[edge.from], graph.files[edge.to], edge.path
            ));
        }
    }
    text
}

/// Every `.rs` file of `src/` as (path relative to `src/`, source) pairs.
fn crate_sources() -> Vec<(String, String)> {
    rust_files(&src())
        .into_iter()
        .map(|file| {
            let relative = file
                .strip_prefix(src())
                .expect("a file under src/")
                .to_string_lossy()
                .replace('\\', "/");
            let source = std::fs::read_to_string(&file).expect("a readable source file");
            (relative, source)
        })
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let graph = file_graph(&crate_sources());
    let cycles = file_cycles(&graph);
    assert!(
        cycles.is_empty(),
        "{} import cycles between files:\n{}",
        cycles.len(),
        cycles
            .iter()
            .map(|set| describe_cycle(&graph, set))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn sources(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect()
}

/// The edges of `files` as `from -> to` lines, sorted.
fn edges_of(files: &[(&str, &str)]) -> Vec<String> {
    let graph = file_graph(&sources(files));
    let mut edges: Vec<String> = graph
        .edges
        .iter()
        .map(|e| format!("{} -> {}", graph.files[e.from], graph.files[e.to]))
        .collect();
    edges.sort();
    edges
}

#[test]
fn two_files_naming_each_other_are_a_cycle() {
    let files = sources(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::X;\npub struct Y;\n"),
        ("b.rs", "pub struct X;\nfn f() -> crate::a::Y { todo!() }\n"),
    ]);
    let graph = file_graph(&files);
    let cycles = file_cycles(&graph);
    assert_eq!(cycles.len(), 1, "{graph:?}");
    let shown = describe_cycle(&graph, &cycles[0]);
    assert!(
        shown.starts_with("cycle of 2 files: src/a.rs, src/b.rs"),
        "{shown}"
    );
    assert!(
        shown.contains("src/a.rs -> src/b.rs: crate::b::X"),
        "{shown}"
    );
    assert!(
        shown.contains("src/b.rs -> src/a.rs: crate::a::Y"),
        "{shown}"
    );
}

#[test]
fn files_naming_one_way_are_no_cycle() {
    let files = sources(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::Y;\n"),
        ("a.rs", "use crate::b::X;\npub struct Y;\n"),
        ("b.rs", "pub struct X;\n"),
    ]);
    let graph = file_graph(&files);
    assert!(file_cycles(&graph).is_empty(), "{graph:?}");
}

#[test]
fn a_child_naming_its_parents_re_export_closes_a_cycle() {
    // The parent re-exports from the child (parent -> child) and the child reaches back for
    // an item through `super::` (child -> parent).
    let files = sources(&[
        ("lib.rs", "mod arena;\n"),
        (
            "arena/mod.rs",
            "mod bins;\nmod chunk;\npub use bins::Bins;\npub use chunk::Chunk;\n",
        ),
        ("arena/bins.rs", "use super::Chunk;\npub struct Bins;\n"),
        ("arena/chunk.rs", "pub struct Chunk;\n"),
    ]);
    let graph = file_graph(&files);
    let cycles = file_cycles(&graph);
    assert_eq!(cycles.len(), 1, "{graph:?}");
    assert!(describe_cycle(&graph, &cycles[0])
        .contains("src/arena/bins.rs -> src/arena/mod.rs: super::Chunk"));
    // Naming the file that defines it breaks the cycle.
    let fixed = sources(&[
        ("lib.rs", "mod arena;\n"),
        (
            "arena/mod.rs",
            "mod bins;\nmod chunk;\npub use bins::Bins;\npub use chunk::Chunk;\n",
        ),
        (
            "arena/bins.rs",
            "use super::chunk::Chunk;\npub struct Bins;\n",
        ),
        ("arena/chunk.rs", "pub struct Chunk;\n"),
    ]);
    assert!(file_cycles(&file_graph(&fixed)).is_empty());
}

#[test]
fn the_file_graph_resolves_paths_to_the_longest_file_prefix() {
    let files: &[(&str, &str)] = &[
        (
            "lib.rs",
            "mod arena;\nmod context;\npub use context::Context;\n",
        ),
        ("arena/mod.rs", "pub mod bins;\n"),
        ("arena/bins.rs", "pub struct Bins;\n"),
        ("context.rs", "mod gathered;\npub struct Context;\n"),
        (
            "context/gathered.rs",
            "use crate::{arena::{bins::Bins, self}, Context as C};\nuse super::Context;\n",
        ),
        ("error.rs", "fn f() { let _ = crate::arena::bins::Bins; }\n"),
    ];
    assert_eq!(
        edges_of(files),
        [
            "context/gathered.rs -> arena/bins.rs",
            "context/gathered.rs -> arena/mod.rs",
            "context/gathered.rs -> context.rs",
            "context/gathered.rs -> lib.rs",
            "error.rs -> arena/bins.rs",
            "lib.rs -> context.rs",
        ]
    );
}

#[test]
fn a_declaration_alone_is_no_edge_and_a_files_own_tests_count_as_the_file() {
    // `mod child;` is no edge; `super::` inside the file's own test module names the file.
    assert!(edges_of(&[
        ("lib.rs", "mod a;\n"),
        (
            "a.rs",
            "pub struct A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::A;\n}\n"
        ),
    ])
    .is_empty());
    // A test module that climbs to another file is an edge of its file.
    assert_eq!(
        edges_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "#[cfg(test)]\nmod tests {\n    use super::super::b::B;\n}\n"
            ),
            ("b.rs", "pub struct B;\nfn c() -> char { '{' }\n"),
        ]),
        ["a.rs -> b.rs"]
    );
    // A child named in a call of the parent is an edge; comments and strings are not.
    assert_eq!(
        edges_of(&[
            ("lib.rs", "mod a;\n"),
            ("a/mod.rs", "mod b;\nfn f() { b::g(); }\n// crate::lib\n"),
            ("a/b.rs", "pub fn g() { let _ = \"super::f\"; }\n"),
        ]),
        ["a/mod.rs -> a/b.rs"]
    );
}

/// Knots of top-level modules that are known and waiting to be dissolved (each sorted). A knot
/// is a set of modules that import each other round a loop: the file graph above has no cycle,
/// but its files collapsed to their top-level module may. The list only shrinks: a new knot, or
/// a known one that takes in another module, fails [`no_new_knot_between_modules`], and so does
/// a listed knot that is gone (take it off the list).
const KNOWN_MODULE_KNOTS: &[&[&str]] = &[];

/// The file graph collapsed to top-level modules (`arena/bins.rs` -> `arena`; `lib.rs`, the
/// table of contents, left out), with one edge per pair of modules: the first path that makes it.
fn module_graph(files: &FileGraph) -> FileGraph {
    let module_of = |file: &str| module_path_of(file).first().cloned();
    let mut modules: Vec<String> = files.files.iter().filter_map(|f| module_of(f)).collect();
    modules.sort();
    modules.dedup();
    let index = |file: &str| {
        module_of(file).map(|m| modules.binary_search(&m).expect("a module of the crate"))
    };
    let mut edges: Vec<Edge> = Vec::new();
    for edge in &files.edges {
        let (Some(from), Some(to)) = (index(&files.files[edge.from]), index(&files.files[edge.to]))
        else {
            continue;
        };
        if from != to && !edges.iter().any(|e| e.from == from && e.to == to) {
            edges.push(Edge {
                from,
                to,
                path: format!("{} ({})", edge.path, files.files[edge.from]),
            });
        }
    }
    FileGraph {
        files: modules,
        edges,
    }
}

#[test]
fn no_new_knot_between_modules() {
    let graph = module_graph(&file_graph(&crate_sources()));
    let knots = file_cycles(&graph);
    let names =
        |set: &Vec<usize>| -> Vec<&str> { set.iter().map(|&m| graph.files[m].as_str()).collect() };
    let unknown: Vec<String> = knots
        .iter()
        .filter(|set| !KNOWN_MODULE_KNOTS.contains(&names(set).as_slice()))
        .map(|set| describe_cycle(&graph, set))
        .collect();
    assert!(
        unknown.is_empty(),
        "modules that import each other round a loop (move the code that closes the loop to \
         the module that owns it):\n{}",
        unknown.join("\n")
    );
    for known in KNOWN_MODULE_KNOTS {
        assert!(
            knots.iter().any(|set| names(set).as_slice() == *known),
            "the knot {known:?} is gone: take it off KNOWN_MODULE_KNOTS"
        );
    }
}

#[test]
fn modules_that_import_each_other_are_a_knot() {
    let files = file_graph(&sources(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a/mod.rs", "mod x; use crate::b::f;"),
        ("a/x.rs", "pub fn g() {}"),
        ("b.rs", "pub fn f() { crate::a::x::g() }"),
        ("c.rs", "use crate::a::x::g;"),
    ]));
    let graph = module_graph(&files);
    let knots: Vec<Vec<&str>> = file_cycles(&graph)
        .iter()
        .map(|set| set.iter().map(|&m| graph.files[m].as_str()).collect())
        .collect();
    assert_eq!(knots, vec![vec!["a", "b"]]);
}
