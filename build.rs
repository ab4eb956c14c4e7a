//! Embeds an rpath to LibTorch so binaries and tests run without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(libtorch) = std::env::var("LIBTORCH") {
        let lib = std::path::Path::new(&libtorch).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        // rustc's default --as-needed would drop torch_cuda: nothing references it directly.
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
