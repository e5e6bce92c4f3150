"""The host <-> language worker messages that function indexing produces (``FunctionRpc``).

The Python worker answers the host's metadata request with one ``RpcFunctionMetadata`` per
function, each holding its ``BindingInfo`` per binding, its raw binding JSON and its retry
options. The worker library builds them from a ``protos`` module that the worker process
generates from the host's ``FunctionRpc.proto``. The devhost runs that library's indexing, so
it supplies the same message types: real protobuf messages, declared here with the proto's
names, enum values and field types, so a value the host's schema would not take is refused
here too. Only the messages indexing uses are declared.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory

PACKAGE = "AzureFunctionsRpcMessages"

_Field = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _INT32 = _Field.TYPE_STRING, _Field.TYPE_BOOL, _Field.TYPE_INT32
_ENUM, _MESSAGE = _Field.TYPE_ENUM, _Field.TYPE_MESSAGE


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="devhost/FunctionRpc.proto",
        package=PACKAGE,
        syntax="proto3",
        dependency=["google/protobuf/duration.proto"],
    )

    binding = file.message_type.add(name="BindingInfo")
    _enum(binding, "Direction", ["in", "out", "inout"])
    _enum(binding, "DataType", ["undefined", "string", "binary", "stream"])
    _field(binding, "type", 2, _STRING)
    _field(binding, "direction", 3, _ENUM, f".{PACKAGE}.BindingInfo.Direction")
    _field(binding, "data_type", 4, _ENUM, f".{PACKAGE}.BindingInfo.DataType")
    _map(binding, "properties", 5, "PropertiesEntry", (_STRING, ""))

    retry = file.message_type.add(name="RpcRetryOptions")
    _enum(retry, "RetryStrategy", ["exponential_backoff", "fixed_delay"])
    _field(retry, "max_retry_count", 2, _INT32)
    for number, name in enumerate(("delay_interval", "minimum_interval", "maximum_interval"), 3):
        _field(retry, name, number, _MESSAGE, ".google.protobuf.Duration")
    _field(retry, "retry_strategy", 6, _ENUM, f".{PACKAGE}.RpcRetryOptions.RetryStrategy")

    metadata = file.message_type.add(name="RpcFunctionMetadata")
    _field(metadata, "directory", 1, _STRING)
    _field(metadata, "script_file", 2, _STRING)
    _field(metadata, "entry_point", 3, _STRING)
    _field(metadata, "name", 4, _STRING)
    _map(metadata, "bindings", 6, "BindingsEntry", (_MESSAGE, f".{PACKAGE}.BindingInfo"))
    _field(metadata, "is_proxy", 7, _BOOL)
    _field(metadata, "language", 9, _STRING)
    _field(metadata, "raw_bindings", 10, _STRING, repeated=True)
    _field(metadata, "function_id", 13, _STRING)
    _field(metadata, "managed_dependency_enabled", 14, _BOOL)
    _field(metadata, "retry_options", 15, _MESSAGE, f".{PACKAGE}.RpcRetryOptions")
    _map(metadata, "properties", 16, "PropertiesEntry", (_STRING, ""))
    return file


def _enum(message: descriptor_pb2.DescriptorProto, name: str, values: list[str]) -> None:
    enum = message.enum_type.add(name=name)
    for number, value in enumerate(values):
        enum.value.add(name=value, number=number)


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: Any,
    type_name: str = "",
    *,
    repeated: bool = False,
) -> None:
    label = _Field.LABEL_REPEATED if repeated else _Field.LABEL_OPTIONAL
    field = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name


def _map(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    entry_name: str,
    value: tuple[Any, str],
) -> None:
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _STRING)
    _field(entry, "value", 2, value[0], value[1])
    _field(message, name, number, _MESSAGE, f".{PACKAGE}.{message.name}.{entry_name}")
    message.field[-1].label = _Field.LABEL_REPEATED


def _protos() -> SimpleNamespace:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_file())
    classes = {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in ("BindingInfo", "RpcRetryOptions", "RpcFunctionMetadata")
    }
    return SimpleNamespace(**classes)


protos = _protos()
"""The ``protos`` namespace the worker library's indexing takes (``protos.BindingInfo`` ...)."""
