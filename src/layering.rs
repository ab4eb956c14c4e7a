//! The layering test: reads `src/` and fails on any `crate::` import that climbs [`LAYERS`],
//! on any cycle between top-level modules (within a layer too), and on any cycle between the
//! child modules of one folder (`super::x` or `crate::a::x` from its direct children). A
//! catalogue's list (`catalogue.rs`, `registry.rs`) names its items, which implement its trait:
//! that one loop is what a catalogue is, so the list's own imports are not counted.

use crate::LAYERS;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layer of a top-level module, or `None` for what is not one (items of `lib.rs`).
fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Source text without comments (line comments, doc comments and block comments).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The top-level modules a file's code names through `crate::`: `crate::a::…` and each
/// first segment of a group `crate::{a::…, b}`.
fn modules_named(code: &str) -> BTreeSet<String> {
    names_after(code, "crate::")
}

/// The first segments named after `prefix` (`crate::`, `super::`, `crate::a::`): `prefix x::…`
/// and each first segment of a group `prefix {x::…, y}`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue; // `$crate::`, `fedsim_crate::`, `super::crate` are not ours
        }
        let rest = code[i + prefix.len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split on commas at depth 0.
            let mut depth = 0;
            let mut start = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(group[start..k].trim_start()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(group[start..k].trim_start()));
                        start = k + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

/// The modules of the binary (`mod x;` in `main.rs`): the command line, above every layer,
/// which reaches the library through `fedsim::` only.
fn binary_modules(src: &Path) -> BTreeSet<String> {
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap_or_default();
    without_comments(&main)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(|m| m.trim().to_string())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("src/ is readable").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust file below `src`: its path below `src`, its top-level module (`a` for `a/…` and
/// `a.rs`) and its text.
fn sources(src: &Path) -> Vec<(PathBuf, String, String)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).expect("below src/").to_path_buf();
            let first = rel.components().next().expect("a path");
            let module = first.as_os_str().to_string_lossy();
            let module = module.trim_end_matches(".rs").to_string();
            let text = std::fs::read_to_string(&file).expect("readable");
            (rel, module, text)
        })
        .collect()
}

/// Imports between top-level modules: `(from, to) → files`.
fn imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let binary = binary_modules(src);
    for (rel, module, text) in sources(src) {
        if module == "lib" || module == "main" || module == "layering" || binary.contains(&module) {
            continue;
        }
        let code = without_comments(&text);
        for named in modules_named(&code) {
            if named != module && layer_of(&named).is_some() {
                edges
                    .entry((module.clone(), named))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    edges
}

/// The top-level modules of `src/` (folders with a `mod.rs` and single files).
fn top_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("src/ is readable")
        .map(|e| e.expect("readable").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().to_string();
            if p.is_dir() {
                p.join("mod.rs").exists().then_some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|m| !["lib", "main", "layering"].contains(&m.as_str()))
        .filter(|m| !binary_modules(src).contains(m))
        .collect()
}

/// The crates, bottom first, with the layers each holds (a range of [`LAYERS`]), from the
/// repository's root: the compiler holds the boundaries between them, the tests here the order
/// within them.
const CRATES: [(&str, std::ops::Range<usize>); 4] = [
    ("crates/kernel", 0..1),
    ("crates/world", 1..2),
    ("crates/algorithms", 2..3),
    (".", 3..LAYERS.len()),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate's `src/` as one tree (links to each crate's modules, the root crate's `lib.rs`
/// and `main.rs` among them), made once per test process: what the scans read, as if the
/// layers were one crate.
fn src() -> PathBuf {
    static TREE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let tree = std::env::temp_dir().join(format!("fedsim-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tree);
        std::fs::create_dir_all(&tree).expect("a temporary folder");
        for (dir, _) in CRATES {
            let src = root().join(dir).join("src");
            for entry in std::fs::read_dir(&src).expect("a crate's src/ is readable") {
                let path = entry.expect("readable").path();
                let name = path.file_name().expect("a name").to_owned();
                if dir != "." && name == "lib.rs" {
                    continue; // a lower crate's root only re-exports the crates below it
                }
                std::os::unix::fs::symlink(&path, tree.join(name)).expect("a link");
            }
        }
        tree
    })
    .clone()
}

/// Each crate holds exactly the modules of its layers.
#[test]
fn the_crates_hold_their_layers() {
    for (dir, layers) in CRATES {
        let held = top_modules(&root().join(dir).join("src"));
        let declared: BTreeSet<String> = LAYERS[layers]
            .iter()
            .flat_map(|layer| layer.iter().map(|m| m.to_string()))
            .collect();
        assert_eq!(held, declared, "{dir}");
    }
}

#[test]
fn every_module_has_a_layer() {
    let missing: Vec<String> = top_modules(&src())
        .into_iter()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "modules missing from LAYERS: {missing:?}"
    );
    for layer in LAYERS {
        for m in *layer {
            assert!(
                top_modules(&src()).contains(*m),
                "LAYERS names `{m}`, not in src/"
            );
        }
    }
}

#[test]
fn no_import_climbs_the_layers() {
    let climbing: Vec<String> = imports(&src())
        .into_iter()
        .filter(|((from, to), _)| layer_of(to) > layer_of(from))
        .map(|((from, to), files)| {
            let files: Vec<String> = files.into_iter().collect();
            format!("{from} → {to} ({})", files.join(", "))
        })
        .collect();
    assert!(
        climbing.is_empty(),
        "imports that climb the layers:\n{}",
        climbing.join("\n")
    );
}

/// A cycle in the graph of `edges` (`from → to`), as the modules along it, if there is one.
fn find_cycle<'a>(edges: impl Iterator<Item = (&'a str, &'a str)>) -> Option<Vec<&'a str>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().push(to);
    }
    // Depth-first search from every module; a path back to a module on the stack is a cycle.
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(at) = stack.iter().position(|s| *s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m);
            return Some(cycle);
        }
        if !done.insert(m) {
            return None;
        }
        stack.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, next, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    next.keys()
        .find_map(|m| visit(m, &next, &mut Vec::new(), &mut done))
}

#[test]
fn no_cycle_between_modules() {
    let edges = imports(&src());
    if let Some(cycle) = find_cycle(edges.keys().map(|(a, b)| (a.as_str(), b.as_str()))) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

/// The modules that list a catalogue's items (each item imports the catalogue's trait).
const CATALOGUE_LISTS: [&str; 2] = ["catalogue", "registry"];

/// Imports between the child modules of the folder `dir` (a module with a `mod.rs`), read
/// from each child's own file (`x.rs` or `x/mod.rs`): `super::y` and `crate::<dir>::y`.
fn sibling_imports(src: &Path, dir: &Path) -> BTreeSet<(String, String)> {
    let children: BTreeMap<String, PathBuf> = std::fs::read_dir(dir)
        .expect("readable")
        .map(|e| e.expect("readable").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().to_string();
            if p.is_dir() {
                let file = p.join("mod.rs");
                file.exists().then_some((name, file))
            } else {
                let name = name.strip_suffix(".rs")?.to_string();
                (name != "mod").then_some((name, p))
            }
        })
        .collect();
    let module_path: Vec<String> = dir
        .strip_prefix(src)
        .expect("below src/")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    let absolute = format!("crate::{}::", module_path.join("::"));
    let mut edges = BTreeSet::new();
    for (child, file) in &children {
        if CATALOGUE_LISTS.contains(&child.as_str()) {
            continue;
        }
        let code = without_comments(&std::fs::read_to_string(file).expect("readable"));
        let named = names_after(&code, "super::")
            .into_iter()
            .chain(names_after(&code, &absolute));
        for other in named {
            if other != *child && children.contains_key(&other) {
                edges.insert((child.clone(), other));
            }
        }
    }
    edges
}

#[test]
fn no_cycle_between_the_modules_of_a_folder() {
    fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable") {
            let path = entry.expect("readable").path();
            if path.is_dir() && path.join("mod.rs").exists() {
                out.push(path.clone());
                folders(&path, out);
            }
        }
    }
    let mut dirs = Vec::new();
    folders(&src(), &mut dirs);
    assert!(dirs.len() >= 10, "read the folders of src/: {dirs:?}");
    for dir in dirs {
        let edges = sibling_imports(&src(), &dir);
        if let Some(cycle) = find_cycle(edges.iter().map(|(a, b)| (a.as_str(), b.as_str()))) {
            panic!("import cycle in {}: {}", dir.display(), cycle.join(" → "));
        }
    }
}

/// The scanner itself, on hand-written text: groups, nested groups, comments, `$crate`.
#[test]
fn the_scanner_finds_what_a_file_imports() {
    let code = without_comments(
        "use crate::{a::X, b::{Y, Z}, c};\n\
         // use crate::commented;\n\
         /* crate::blocked */ let v = crate::d::f();\n\
         $crate::e::g(); fedsim_crate::h;",
    );
    let found: Vec<String> = modules_named(&code).into_iter().collect();
    assert_eq!(found, ["a", "b", "c", "d"]);
    // A climbing import and a cycle are seen.
    let dir = std::env::temp_dir().join(format!("fedsim-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sim")).unwrap();
    std::fs::write(dir.join("sim/mod.rs"), "use crate::studies::X;").unwrap();
    std::fs::write(dir.join("studies.rs"), "use crate::{sim::Y};").unwrap();
    let edges = imports(&dir);
    let keys: Vec<(String, String)> = edges.into_keys().collect();
    assert_eq!(
        keys,
        [
            ("sim".to_string(), "studies".to_string()),
            ("studies".to_string(), "sim".to_string())
        ]
    );
    assert!(layer_of("studies") > layer_of("sim"));
    // Two children of one folder that import each other, by `super::` and by `crate::`.
    std::fs::write(dir.join("sim/a.rs"), "use super::{b::X};").unwrap();
    std::fs::write(dir.join("sim/b.rs"), "fn f() { crate::sim::a::g() }").unwrap();
    let siblings = sibling_imports(&dir, &dir.join("sim"));
    let cycle = find_cycle(siblings.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    assert_eq!(cycle, Some(vec!["a", "b", "a"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The README's layout table names every top-level module where it is (its crate's folder), in
/// the layer `LAYERS` gives it.
#[test]
fn the_readme_layout_matches_the_tree() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md is readable");
    let modules = CRATES.iter().flat_map(|(dir, _)| {
        let folder = match *dir {
            "." => "src".to_string(),
            dir => format!("{dir}/src"),
        };
        let held = top_modules(&root().join(dir).join("src"));
        held.into_iter().map(move |m| (folder.clone(), m))
    });
    for (folder, m) in modules {
        let layer = layer_of(&m).expect("every module has a layer") + 1;
        let named = [format!("`{folder}/{m}/`"), format!("`{folder}/{m}.rs`")];
        let row = readme
            .lines()
            .find(|l| named.iter().any(|n| l.contains(n.as_str())))
            .unwrap_or_else(|| panic!("README's layout table does not name `{m}`"));
        assert!(
            row.starts_with(&format!("| {layer} |")),
            "README puts `{m}` in another layer than {layer}: {row}"
        );
    }
}

/// What only `src/io/` may call: every way Rust, polars, plotters or libtorch opens, reads,
/// writes, renames or removes a file by its path. The rest of fedsim goes through `io`, whose
/// readers refuse what is not a regular file and bound its size, and whose writers keep the
/// output-folder promise (manifest, lock, staging, never a foreign file).
const FILE_CALLS: [&str; 22] = [
    "File::create",
    "File::open",
    "OpenOptions",
    "fs::write",
    "fs::read(",
    "fs::read_to_string",
    "fs::rename",
    "fs::copy",
    "fs::remove_file",
    "fs::remove_dir",
    "fs::create_dir",
    "fs::hard_link",
    "fs::set_permissions",
    "os::unix::fs::symlink",
    "tempfile::",
    "try_into_reader_with_file_path",
    "with_file_path",
    "BitMapBackend::new",
    "SVGBackend::new",
    "CModule::load(",
    "Tensor::load",
    ".save(",
];

/// A file's code without its comments and without its unit tests (the `#[cfg(test)] mod
/// tests` block, last in the file by the house's habit), where test fixtures may use the file
/// system directly.
fn code_outside_tests(text: &str) -> String {
    let code = without_comments(text);
    match code.find("#[cfg(test)]\nmod tests") {
        Some(at) => code[..at].to_string(),
        None => code,
    }
}

/// The places (file: call) of `src/` outside `src/io/` that use [`FILE_CALLS`].
fn file_calls_outside_io(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, module, text) in sources(src) {
        if module == "io" || module == "layering" {
            continue;
        }
        let code = code_outside_tests(&text);
        for call in FILE_CALLS {
            // A call, not the end of a longer name (`InputFile::open` is io's own).
            let called = code.match_indices(call).any(|(i, _)| {
                !call.starts_with(|c: char| c.is_ascii_alphabetic())
                    || !code[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            if called {
                found.push(format!("{}: {call}", rel.display()));
            }
        }
    }
    found
}

#[test]
fn only_io_touches_files() {
    let found = file_calls_outside_io(&src());
    assert!(
        found.is_empty(),
        "file-system calls outside src/io/ (go through `crate::io`: `read_text`, \
         `read_bytes`, `InputFile`, `OutputFolder`, `Staging`):\n{}",
        found.join("\n")
    );
}

/// The scan itself, on hand-written files: a call in code is found, in a comment or a unit
/// test it is not, and `src/io/` may make it.
#[test]
fn the_file_call_scan_finds_what_it_should() {
    let dir = std::env::temp_dir().join(format!("fedsim-calls-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("io")).unwrap();
    std::fs::create_dir_all(dir.join("results")).unwrap();
    std::fs::write(dir.join("io/mod.rs"), "fn f() { std::fs::write(p, b) }").unwrap();
    std::fs::write(
        dir.join("results/mod.rs"),
        "// std::fs::write(commented)\nfn g() { let f = std::fs::File::create(p); }\n\
         #[cfg(test)]\nmod tests { fn h() { std::fs::remove_file(p) } }",
    )
    .unwrap();
    std::fs::write(
        dir.join("plots.rs"),
        "let b = BitMapBackend::new(path, size); let i = InputFile::open(p, l);",
    )
    .unwrap();
    let mut found = file_calls_outside_io(&dir);
    found.sort();
    assert_eq!(
        found,
        [
            "plots.rs: BitMapBackend::new",
            "results/mod.rs: File::create"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The places (file) of `src/` above the `plan` layer (and in the binary's modules) that make
/// a [`crate::settings::FieldError`]: a field of the scenario found wrong.
fn field_errors_above_the_plan(src: &Path) -> Vec<String> {
    let plan = layer_of("plan").expect("plan is a layer");
    let binary = binary_modules(src);
    let mut found = Vec::new();
    for (rel, module, text) in sources(src) {
        let above = match layer_of(&module) {
            Some(layer) => layer > plan,
            None => binary.contains(&module) || module == "main",
        };
        let code = code_outside_tests(&text);
        if above && (code.contains("FieldError::new") || code.contains("FieldError {")) {
            found.push(rel.display().to_string());
        }
    }
    found
}

/// A `FieldError` is made only in the layers that read and decide input: settings, the
/// catalogues that validate their items, the scenario and the plan. Above the plan a run has
/// been decided, and nothing there can find a field of the scenario wrong.
#[test]
fn only_the_layers_that_read_input_make_field_errors() {
    let found = field_errors_above_the_plan(&src());
    assert!(
        found.is_empty(),
        "FieldErrors made above the plan (check it in `scenario` or `plan` instead):\n{}",
        found.join("\n")
    );
}

/// The scan itself, on hand-written files: one made in `actors` is found, one in `plan` or a
/// unit test is not.
#[test]
fn the_field_error_scan_finds_what_it_should() {
    let dir = std::env::temp_dir().join(format!("fedsim-fields-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("actors")).unwrap();
    std::fs::create_dir_all(dir.join("plan")).unwrap();
    std::fs::write(
        dir.join("actors/mod.rs"),
        "fn f() -> FieldError { FieldError::new(p, m) }",
    )
    .unwrap();
    std::fs::write(
        dir.join("actors/run.rs"),
        "// FieldError::new in a comment\n#[cfg(test)]\nmod tests { fn g() { FieldError::new(p, m) } }",
    )
    .unwrap();
    std::fs::write(dir.join("plan/mod.rs"), "fn h() { FieldError::new(p, m) }").unwrap();
    assert_eq!(field_errors_above_the_plan(&dir), ["actors/mod.rs"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Algorithms do their arithmetic on flat vectors and ask `models` for every tensor
/// computation, so that one tch code path serves a client alone and a cohort: no `tch::` in
/// `src/algorithms/`.
#[test]
fn algorithms_hold_no_tch_code() {
    let found: Vec<String> = (sources(&src()).into_iter())
        .filter(|(_, module, _)| module == "algorithms")
        .filter(|(_, _, text)| {
            let code = without_comments(text);
            // `tch::`, not the end of a longer name (`Batch::`, `Dispatch::`).
            code.match_indices("tch::").any(|(i, _)| {
                !(code[..i].chars().next_back()).is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(rel, _, _)| rel.display().to_string())
        .collect();
    assert!(found.is_empty(), "tch code in `algorithms`: {found:?}");
}
