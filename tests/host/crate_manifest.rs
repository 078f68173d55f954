//! The manifest is ready for crates.io: `rust-version` is at least every dependency's (so the
//! toolchain it names can build what Cargo.lock resolves), and the README, which is also the
//! crate's documentation on docs.rs, links its images by absolute URL (docs.rs and crates.io
//! have no copy of the repository's files to resolve a relative one against).

use serde_json::Value;

/// A `rust-version` as comparable numbers: "1.87" and "1.87.0" are the same toolchain.
fn toolchain(version: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = version
        .split('.')
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("rust-version {version:?} is not numeric"))
        })
        .collect();
    parts.resize(3, 0);
    parts
}

/// `cargo metadata` of this crate with the versions in Cargo.lock, every platform's packages.
fn metadata() -> Value {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

#[test]
fn rust_version_is_not_below_any_dependencys() {
    let metadata = metadata();
    let packages = metadata["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == env!("CARGO_PKG_NAME"))
        .expect("this crate in its own metadata");
    let declared = ours["rust_version"]
        .as_str()
        .expect("Cargo.toml sets rust-version");
    // Every package of Cargo.lock, dev-dependencies and other platforms' included: the tests
    // build with that toolchain too, and users build on every platform.
    let mut too_new: Vec<(Vec<u64>, String)> = packages
        .iter()
        .filter(|p| p["name"] != env!("CARGO_PKG_NAME"))
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            let name = p["name"].as_str()?;
            let version = p["version"].as_str()?;
            (toolchain(needs) > toolchain(declared))
                .then(|| (toolchain(needs), format!("{name} {version} needs {needs}")))
        })
        .collect();
    too_new.sort_by(|a, b| b.0.cmp(&a.0));
    let highest: Vec<&str> = too_new
        .iter()
        .take(5)
        .map(|(_, why)| why.as_str())
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version = {declared:?} in Cargo.toml is older than what {} dependencies in \
         Cargo.lock need; raise it to the highest ({highest:?}, ...)",
        too_new.len()
    );
    assert_eq!(declared, env!("CARGO_PKG_RUST_VERSION"));
}

/// The targets of the Markdown images `![alt](target)` in `text` (code such as `vec![1]` is not
/// an image: an image's `!` does not follow a word character, and its `]` is followed by `(`).
fn image_targets(text: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    for (at, _) in text.match_indices("![") {
        let after_word = text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        let rest = &text[at + 2..];
        let Some((alt, tail)) = rest.split_once(']') else {
            continue;
        };
        if after_word || alt.contains('\n') {
            continue;
        }
        if let Some(target) = tail.strip_prefix('(').and_then(|t| t.split_once(')')) {
            targets.push(target.0);
        }
    }
    targets
}

#[test]
fn image_targets_finds_images_and_not_macros() {
    let text = "let v = vec![1, 2];\n![a picture](https://x/y.png) and ![b](c.png)\n[link](z)";
    assert_eq!(image_targets(text), ["https://x/y.png", "c.png"]);
}

#[test]
fn the_readme_links_its_images_by_absolute_url() {
    let images = image_targets(include_str!("../../README.md"));
    assert!(!images.is_empty(), "the README shows the memory report");
    for url in images {
        assert!(
            url.starts_with("https://"),
            "README image {url:?} must be an absolute https URL to resolve on docs.rs and \
             crates.io"
        );
    }
}

#[test]
fn the_manifest_names_where_the_crate_lives() {
    for (field, value) in [
        ("repository", env!("CARGO_PKG_REPOSITORY")),
        ("homepage", env!("CARGO_PKG_HOMEPAGE")),
        ("description", env!("CARGO_PKG_DESCRIPTION")),
        ("license", env!("CARGO_PKG_LICENSE")),
    ] {
        assert!(!value.is_empty(), "Cargo.toml needs {field} for crates.io");
    }
    let metadata = metadata();
    let ours = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == env!("CARGO_PKG_NAME"))
        .expect("this crate")
        .clone();
    assert!(ours["documentation"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    let keywords = ours["keywords"].as_array().expect("keywords");
    assert!(
        (1..=5).contains(&keywords.len()),
        "crates.io takes 1 to 5 keywords"
    );
    let categories = ours["categories"].as_array().expect("categories");
    assert!(
        (1..=5).contains(&categories.len()),
        "crates.io takes 1 to 5 categories"
    );
}
