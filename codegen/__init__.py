"""cuwire.codegen: CUDA headers -> typed API model -> generated/ (client stubs, server handlers, wire schema)."""
