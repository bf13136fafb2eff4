"""Values for protobuf fields from a fuzzer's bytes, shared by the fuzz targets (fuzz_session.py,
fuzz_client.py): bytes, strings, booleans and floats drawn the same way; an integer field's range, which
each target draws from in its own way."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

NOT_PLAIN = object()  # an integer field: the target draws it
SIGNED = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT32,
          FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64,
          FieldDescriptor.TYPE_ENUM}
WIDE = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


def plain(fdp, field, max_bytes: int) -> object:
    """A value for a bytes, string, bool or float field (up to max_bytes bytes); None for a message field;
    NOT_PLAIN for an integer field."""
    if field.type in (FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_STRING):
        raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, max_bytes))
        return raw if field.type == FieldDescriptor.TYPE_BYTES else raw.decode("latin-1")
    if field.type == FieldDescriptor.TYPE_BOOL:
        return fdp.ConsumeBool()
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return fdp.ConsumeFloat()
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return None
    return NOT_PLAIN


def int_range(field) -> tuple[int, int]:
    """The values an integer field holds."""
    bits = 64 if field.type in WIDE else 32
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if field.type in SIGNED else (0, (1 << bits) - 1)
