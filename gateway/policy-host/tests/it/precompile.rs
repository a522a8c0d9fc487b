//! Loading, as an upload or a restart does it: what is refused before compiling, the
//! verified precompile cache (a tampered file is never loaded, and is compiled
//! again), and that only accepted components are cached.

use forge_policy_host::{LoadError, Plugin, PolicyEngine};

use crate::support::{component, test_limits};

fn cwasm_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .expect("cache dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

#[test]
fn a_restart_loads_verified_artifacts_and_a_tampered_one_is_compiled_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = component("pool-series");

    let first = PolicyEngine::new(test_limits(), Some(dir.path().into())).expect("engine");
    Plugin::load(&first, "p", &bytes).expect("load");
    assert_eq!(first.compilations(), 1);
    let files = cwasm_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");

    // A restart: loaded from the cache, nothing compiled.
    let second = PolicyEngine::new(test_limits(), Some(dir.path().into())).expect("engine");
    Plugin::load(&second, "p", &bytes).expect("load");
    assert_eq!(second.compilations(), 0);
    assert_eq!(second.cache_rejections(), 0);

    // One flipped byte in the compiled code: refused, compiled again, and the
    // rewritten file verifies on the next start.
    let mut artifact = std::fs::read(&files[0]).expect("read");
    let middle = artifact.len() / 2;
    artifact[middle] ^= 0x5a;
    std::fs::write(&files[0], &artifact).expect("write");
    let third = PolicyEngine::new(test_limits(), Some(dir.path().into())).expect("engine");
    let p = Plugin::load(&third, "p", &bytes).expect("load after recompiling");
    assert_eq!(third.cache_rejections(), 1);
    assert_eq!(third.compilations(), 1);
    assert_eq!(p.digest(), forge_policy_host::digest_of(&bytes));
    let fourth = PolicyEngine::new(test_limits(), Some(dir.path().into())).expect("engine");
    Plugin::load(&fourth, "p", &bytes).expect("load");
    assert_eq!(
        (fourth.compilations(), fourth.cache_rejections()),
        (0, 0),
        "the rewritten artifact verifies"
    );
}

#[test]
fn refused_and_unsaved_components_leave_nothing_in_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = PolicyEngine::new(test_limits(), Some(dir.path().into())).expect("engine");

    // Refused before compiling: nothing compiled, nothing written.
    let wasi = crate::support::fixture("plugins/imports-wasi.wat");
    let wasi = wat::parse_bytes(&wasi).expect("wat").into_owned();
    let err = Plugin::load(&engine, "wasi", &wasi).expect_err("refused");
    assert!(matches!(err, LoadError::ForbiddenImport(_)), "{err}");
    assert_eq!(engine.compilations(), 0);

    // Compiled but not saved (an upload still checking its settings): no file until
    // `save`.
    let bytes = component("team-quota");
    let limits = engine.limits().plugin_defaults();
    let (_plugin, unsaved) = Plugin::load_unsaved(&engine, "q", "1", &bytes, limits).expect("load");
    assert_eq!(engine.compilations(), 1);
    assert!(cwasm_files(dir.path()).is_empty(), "not cached before save");
    unsaved.save().expect("save");
    assert_eq!(cwasm_files(dir.path()).len(), 1);
}

#[test]
fn shapes_beyond_the_limits_are_refused_before_compiling() {
    let engine = crate::support::engine();
    let before = engine.compilations();
    let mut text = String::from("(component (core module ");
    for _ in 0..200_001 {
        text.push_str("(func)");
    }
    text.push_str("))");
    let many = wat::parse_str(&text).expect("wat");
    let err = Plugin::load(&engine, "many", &many).expect_err("too many functions");
    assert!(
        matches!(&err, LoadError::TooComplex(m) if m.contains("functions")),
        "{err}"
    );
    assert_eq!(engine.compilations(), before, "nothing compiled");
}

/// The reference plugins and the interpreter components fit the default shape limits
/// with room to spare (printed, so a change in their shape shows).
#[test]
fn every_shipped_plugin_fits_the_default_shape() {
    let limits = forge_policy_host::ShapeLimits::default();
    let allowed = [
        "forge:policy/host@0.3.0",
        "forge:policy/types@0.3.0",
        "forge:policy/request-view@0.3.0",
        "forge:policy/host@0.2.0",
        "forge:policy/types@0.2.0",
        "forge:policy/host@0.1.0",
        "forge:policy/types@0.1.0",
    ];
    for name in [
        "pool-series",
        "team-quota",
        "rwo-guard",
        "scratch-guard",
        "scratch-guard-py",
        "scratch-guard-ts",
    ] {
        let shape = forge_policy_host::precheck::precheck(
            &component(name),
            &limits,
            &allowed,
            &["evaluate", "validate-settings"],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!(
            "{name}: {} modules, {} functions, largest body {} bytes",
            shape.modules, shape.functions, shape.max_function_bytes
        );
        assert!(
            shape.functions * 2 <= limits.max_functions,
            "{name}: {shape:?}"
        );
        assert!(
            shape.max_function_bytes * 2 <= limits.max_function_bytes,
            "{name}: {shape:?}"
        );
    }
}
