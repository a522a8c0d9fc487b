//! Checks on a component's bytes before anything compiles it: parsed (not compiled)
//! with `wasmparser`, which allocates in proportion to what it reads.
//!
//! Compiling is the expensive step of an upload (Cranelift, seconds for a large
//! component, and not interruptible), so everything that can be refused without it is
//! refused here, each with its own error: bytes that are not a component, imports
//! other than the policy host interface (WASI included), a component that does not
//! export the policy world's functions, and a shape beyond the engine's
//! [`ShapeLimits`] — too many core modules, functions, memories or tables, or one
//! function body too large. Those bound how long a compile can take and how much of the
//! shared instance pool one instantiation can take. The pooling allocator checks the
//! exact per-component counts again when the compiled component is loaded.

use wasmparser::{ComponentExternalKind, ComponentTypeRef, Parser, Payload};

use crate::error::LoadError;

/// Bounds on a component's shape (per component, nested modules included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShapeLimits {
    /// Core module instances an instantiation may create (also the pooling allocator's
    /// `max_core_instances_per_component`); core modules defined are bounded by it too.
    pub max_core_instances: u32,
    /// Linear memories (the pooling allocator's `max_memories_per_component`; per
    /// module here).
    pub max_memories: u32,
    /// Tables (the pooling allocator's `max_tables_per_component`; per module here).
    pub max_tables: u32,
    /// Functions defined in all core modules together.
    pub max_functions: u32,
    /// Bytes of the largest function body.
    pub max_function_bytes: u32,
}

impl Default for ShapeLimits {
    /// Room for interpreter components (Python's and JavaScript's carry a few
    /// modules, tens of thousands of functions and large interpreter loops), far below
    /// what can exhaust the pool or stall the compiler.
    fn default() -> Self {
        ShapeLimits {
            max_core_instances: 64,
            max_memories: 4,
            max_tables: 16,
            max_functions: 200_000,
            max_function_bytes: 4 << 20,
        }
    }
}

/// What the check read off a component.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// Core modules defined (nested included).
    pub modules: u32,
    /// Functions defined in them.
    pub functions: u32,
    /// The largest function body, in bytes.
    pub max_function_bytes: u32,
    /// Top-level interface imports, by name (type imports are not listed).
    pub imports: Vec<String>,
    /// Top-level exports, by name.
    pub exports: Vec<(String, ComponentExternalKind)>,
}

/// Read the shape of `bytes`, refusing what the policy host would never load.
/// `allowed_imports` are the interface names a plugin may import; `required_exports`
/// the functions every supported world exports.
pub fn precheck(
    bytes: &[u8],
    limits: &ShapeLimits,
    allowed_imports: &[&str],
    required_exports: &[&str],
) -> Result<Shape, LoadError> {
    if !(bytes.len() >= 8 && bytes[0..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]) {
        return Err(LoadError::NotAComponent(
            "expected the component-model binary header (version 0x0d, layer 1); \
             build with `forge-plugin build` or `wasm-tools component new`"
                .into(),
        ));
    }
    let too = |what: String| Err(LoadError::TooComplex(what));
    let mut shape = Shape::default();
    // Nesting depth: 1 inside the top-level component, more inside nested ones.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| LoadError::NotAComponent(format!("{e}")))?;
        match payload {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ModuleSection { .. } => {
                shape.modules += 1;
                if shape.modules > limits.max_core_instances {
                    return too(format!(
                        "more than {} core modules",
                        limits.max_core_instances
                    ));
                }
            }
            Payload::MemorySection(r) if r.count() > limits.max_memories => {
                return too(format!(
                    "a module defines {} memories; at most {} are allowed",
                    r.count(),
                    limits.max_memories
                ));
            }
            Payload::TableSection(r) if r.count() > limits.max_tables => {
                return too(format!(
                    "a module defines {} tables; at most {} are allowed",
                    r.count(),
                    limits.max_tables
                ));
            }
            Payload::CodeSectionStart { count, .. } => {
                shape.functions = shape.functions.saturating_add(count);
                if shape.functions > limits.max_functions {
                    return too(format!(
                        "more than {} functions in all",
                        limits.max_functions
                    ));
                }
            }
            Payload::CodeSectionEntry(body) => {
                let len = u32::try_from(body.range().len()).unwrap_or(u32::MAX);
                shape.max_function_bytes = shape.max_function_bytes.max(len);
                if len > limits.max_function_bytes {
                    return too(format!(
                        "a function body of {len} bytes; at most {} are allowed",
                        limits.max_function_bytes
                    ));
                }
            }
            Payload::ComponentImportSection(r) if depth == 1 => {
                for import in r {
                    let import = import.map_err(|e| LoadError::NotAComponent(format!("{e}")))?;
                    // A type import (the WIT types of the exports' signatures) grants
                    // nothing; every other import must be an allowed host interface.
                    if matches!(import.ty, ComponentTypeRef::Type(_)) {
                        continue;
                    }
                    let name = import.name.name;
                    let instance = matches!(import.ty, ComponentTypeRef::Instance(_));
                    if !instance || !allowed_imports.contains(&name) {
                        return Err(LoadError::ForbiddenImport(name.to_string()));
                    }
                    shape.imports.push(name.to_string());
                }
            }
            Payload::ComponentExportSection(r) if depth == 1 => {
                for export in r {
                    let export = export.map_err(|e| LoadError::NotAComponent(format!("{e}")))?;
                    shape
                        .exports
                        .push((export.name.name.to_string(), export.kind));
                }
            }
            _ => {}
        }
    }
    let missing: Vec<&str> = required_exports
        .iter()
        .copied()
        .filter(|want| {
            !shape
                .exports
                .iter()
                .any(|(name, kind)| name == want && *kind == ComponentExternalKind::Func)
        })
        .collect();
    if !missing.is_empty() {
        return Err(LoadError::MissingExports(missing.join(", ")));
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOWED: [&str; 1] = ["forge:policy/host@0.2.0"];
    const REQUIRED: [&str; 2] = ["evaluate", "validate-settings"];

    fn check(wat: &str, limits: &ShapeLimits) -> Result<Shape, LoadError> {
        precheck(
            &wat::parse_str(wat).expect("wat"),
            limits,
            &ALLOWED,
            &REQUIRED,
        )
    }

    /// A component exporting the two functions, with `extra` core-module fields.
    fn component(extra: &str) -> String {
        format!(
            r#"(component
                (core module $m
                    {extra}
                    (func (export "e") (result i32) i32.const 0)
                    (func (export "v") (result i32) i32.const 0))
                (core instance $i (instantiate $m))
                (func $e (result u32) (canon lift (core func $i "e")))
                (func $v (result u32) (canon lift (core func $i "v")))
                (export "evaluate" (func $e))
                (export "validate-settings" (func $v)))"#
        )
    }

    #[test]
    fn a_plain_component_passes_with_its_shape() {
        let shape = check(&component(""), &ShapeLimits::default()).expect("passes");
        assert_eq!(shape.modules, 1);
        assert_eq!(shape.functions, 2);
        assert!(shape.max_function_bytes > 0);
        assert!(shape.imports.is_empty());
    }

    #[test]
    fn not_a_component_is_refused_before_parsing() {
        let module = wat::parse_str("(module)").expect("wat");
        let err = precheck(&module, &ShapeLimits::default(), &ALLOWED, &REQUIRED)
            .expect_err("a core module");
        assert!(matches!(err, LoadError::NotAComponent(_)), "{err:?}");
        let err = precheck(
            b"\0asm\x0d\0\x01\0garbage",
            &ShapeLimits::default(),
            &ALLOWED,
            &REQUIRED,
        )
        .expect_err("garbage");
        assert!(matches!(err, LoadError::NotAComponent(_)), "{err:?}");
    }

    #[test]
    fn imports_other_than_the_host_are_refused_by_name() {
        let wat = r#"(component (import "wasi:filesystem/types@0.2.0" (instance)))"#;
        let err = check(wat, &ShapeLimits::default()).expect_err("wasi");
        assert!(
            matches!(&err, LoadError::ForbiddenImport(n) if n == "wasi:filesystem/types@0.2.0"),
            "{err:?}"
        );
        let func = r#"(component (import "forge:policy/host@0.2.0" (func)))"#;
        let err = check(func, &ShapeLimits::default()).expect_err("not an instance");
        assert!(matches!(err, LoadError::ForbiddenImport(_)), "{err:?}");
        let typed = r#"(component (import "request" (type (sub resource))))"#;
        let err = check(typed, &ShapeLimits::default()).expect_err("no exports");
        assert!(
            matches!(err, LoadError::MissingExports(_)),
            "a type import passes: {err:?}"
        );
        let ok = r#"(component (import "forge:policy/host@0.2.0" (instance)))"#;
        let err = check(ok, &ShapeLimits::default()).expect_err("no exports");
        assert!(
            matches!(&err, LoadError::MissingExports(m) if m == "evaluate, validate-settings"),
            "{err:?}"
        );
    }

    #[test]
    fn shapes_over_the_limits_are_refused_naming_the_limit() {
        let tight = ShapeLimits {
            max_core_instances: 1,
            max_memories: 1,
            max_tables: 1,
            max_functions: 2,
            max_function_bytes: 64,
        };
        let two_memories = component("(memory 1) (memory 1)");
        let err = check(&two_memories, &tight).expect_err("memories");
        assert!(
            matches!(&err, LoadError::TooComplex(m) if m.contains("2 memories")),
            "{err:?}"
        );

        let three_funcs = component("(func)");
        let err = check(&three_funcs, &tight).expect_err("functions");
        assert!(
            matches!(&err, LoadError::TooComplex(m) if m.contains("functions")),
            "{err:?}"
        );

        let big_body = component(&format!("(func {})", "i32.const 1 drop ".repeat(40)));
        let roomy = ShapeLimits {
            max_functions: 10,
            ..tight
        };
        let err = check(&big_body, &roomy).expect_err("body");
        assert!(
            matches!(&err, LoadError::TooComplex(m) if m.contains("function body")),
            "{err:?}"
        );

        let two_modules = r#"(component (core module) (core module))"#;
        let err = check(two_modules, &tight).expect_err("modules");
        assert!(
            matches!(&err, LoadError::TooComplex(m) if m.contains("core modules")),
            "{err:?}"
        );

        assert!(check(&component(""), &roomy).is_ok(), "within every limit");
    }
}
