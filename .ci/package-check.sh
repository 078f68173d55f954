#!/usr/bin/env bash
# The crate as crates.io takes it. Its manifest (metadata, rust-version against every
# dependency's) is checked by tests/host/crate_manifest.rs; here:
# - our own code uses no standard-library item newer than rust-version (only one toolchain is
#   installed, so clippy's `incompatible_msrv` lint stands in for building with the old one);
# - `cargo package` packs the crate and verifies it by building the packed sources. That build
#   is the dev profile, which the release tests do not share: debug info is left out to save
#   CI time (it is not needed to show the sources compile).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
cargo clippy --release --lib --locked --quiet -- -A clippy::all -D clippy::incompatible_msrv
echo "rust-version: our code needs nothing newer ($((SECONDS - start)) s)"
# CI packs a fresh clone; a developer's run may have uncommitted work.
dirty=()
[ "${CI:-}" = true ] || dirty=(--allow-dirty)
start=$SECONDS
CARGO_PROFILE_DEV_DEBUG=0 cargo package --locked --quiet "${dirty[@]}"
echo "cargo package: packed and verified ($((SECONDS - start)) s)"
