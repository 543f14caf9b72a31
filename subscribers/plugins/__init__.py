"""WASM plugin hooks: plugin.toml folders under <workspace>/plugins, run with wasmtime in the shell-hook workers."""
