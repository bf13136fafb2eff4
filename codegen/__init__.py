"""cuwire.codegen: CUDA headers -> typed API model -> generated/ (client stubs, server handlers, wire schema)."""

def build_api():
    """The whole model: the parsed headers, annotated, plus the exported names no header declares."""
    from . import annotations, headers, parse

    api = parse.parse_api(headers.include_dir(), headers.CUDA_VERSION)
    annotations.apply(api, annotations.load())
    api.functions += parse.undeclared_exports(api.functions)
    return api
