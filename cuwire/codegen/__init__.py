"""cuwire.codegen: CUDA headers -> typed API model -> generated/ (client stubs, server handlers, wire schema)."""

def build_api():
    """The whole model: the parsed headers, annotated, plus the exported names no header declares."""
    from . import annotations, headers, parse, procs

    api = parse.parse_api(headers.include_dir(), headers.CUDA_VERSION)
    annotations.apply(api, annotations.load())
    api.functions += parse.undeclared_exports(api.functions)
    driver = [f for f in api.functions if f.api == "driver"]
    exported = {f.name for f in driver} | {a for f in driver for a in f.aliases}
    api.procs = procs.proc_variants(headers.include_dir(), exported)
    procs.check_aliases(api.functions, headers.include_dir(), exported)
    return api
