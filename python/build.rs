//! Embeds an rpath to LibTorch (as the fedsim crate's build.rs does), so that the extension
//! module loads whether or not `import torch` came first.
fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(libtorch) = std::env::var("LIBTORCH") {
        let lib = std::path::Path::new(&libtorch).join("lib");
        let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
