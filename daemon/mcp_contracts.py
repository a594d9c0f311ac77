"""An MCP tool's input is a request contract (``services/schemas.py``), not a second set of rules.

``bind_contract(mcp, tool_name, Request)`` makes a registered tool:

- publish the request model's JSON schema as its ``inputSchema`` (the limits an
  agent sees are the ones the daemon enforces);
- validate its arguments with that model, so a bad argument is a tool error
  with exactly the message the socket RPC and REST give (after the SDK's
  ``Error executing tool NAME:`` prefix), and an unknown argument is refused
  instead of silently dropped.

The SDK validates arguments with a model it derives from the function's
signature and reports pydantic's own text; this swaps that step for the
contract's (``FuncMetadata.validate_arguments`` is the SDK's documented seam:
its fields are read live). The function keeps its typed signature for readers.

Why the one private attribute (``mcp._tool_manager``), checked against the SDK's
source (mcp 2.3): ``MCPServer`` has no public way to give a tool an input model.
``add_tool(fn, ...)`` / ``@tool`` always derive the schema and the validating model
from ``fn``'s signature; ``list_tools()`` returns copies (``MCPTool``), so changing
them changes nothing; and the public ``middleware`` chain, which could refuse a
call and rewrite ``tools/list``, is marked provisional ("the signature may change
in a 2.x minor release"). So the registered ``Tool`` is fetched from the tool
manager (the SDK itself does the same in ``MCPServer._tool_input_schema``), and a
changed SDK fails loudly here (``bind_contract`` raises) instead of silently
publishing another schema; tests/test_contracts.py compares what a real client
is told with the models.

The tool's ``outputSchema`` is published with its local ``$ref``s inlined
(``inline_local_refs``): the same schema, but the SDK's client validates every
result against it with ``jsonschema``, and resolving one ``$ref`` per selected
memory was ~18 % of that (get_context: ~125 entries, 6.2 -> 5.1 ms per result).
"""

from __future__ import annotations

from typing import Any

from ctxos.services.schemas import ContractError, Request, input_schema, validate
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

_REFUSED = "__ctxos_contract_refusal__"  # carries the contract's message from validation to the call


class ContractArguments(FuncMetadata):
    """The SDK's argument step, done by a request model; a refusal travels to the call as one kwarg."""

    request: Any = None

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        # pre_parse_json: clients that send a list as a JSON string still work (the SDK's own leniency).
        arguments = self.pre_parse_json(arguments_to_validate or {})
        try:
            return validate(self.request, arguments).params()
        except ContractError as exc:
            return {_REFUSED: exc.message}


def bind_contract(mcp: MCPServer, name: str, request: type[Request]) -> None:
    """Make tool ``name`` take exactly ``request``'s parameters (schema, limits and messages)."""
    tool = mcp._tool_manager.get_tool(name)  # noqa: SLF001 - the SDK has no public lookup by name
    if tool is None:
        raise ValueError(f"no MCP tool named {name!r}")
    fields = set(request.model_fields)
    signature = set(tool.parameters.get("properties", {}))
    if fields != signature:
        raise ValueError(
            f"tool {name!r} takes {sorted(signature)} but its contract {request.__name__} has {sorted(fields)}"
        )
    original, body = tool.fn_metadata, tool.fn

    async def guarded(**kwargs: Any) -> Any:
        if _REFUSED in kwargs:
            raise ToolError(kwargs[_REFUSED])
        return await body(**kwargs)

    tool.fn_metadata = ContractArguments(
        arg_model=original.arg_model,
        output_schema=inline_local_refs(original.output_schema),
        output_model=original.output_model,
        wrap_output=original.wrap_output,
        request=request,
    )
    tool.fn = guarded
    tool.is_async = True
    tool.parameters = input_schema(request)


_LOCAL_DEFS = "#/$defs/"


def inline_local_refs(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """``schema`` with every ``{"$ref": "#/$defs/X"}`` replaced by ``X`` itself (``$defs`` dropped when unused).

    A definition that refers to itself (a recursive model) keeps its ``$ref``s, and then ``$defs``.
    """
    if not schema or "$defs" not in schema:
        return schema
    defs: dict[str, Any] = schema["$defs"]
    kept = False

    def walk(node: Any, inside: tuple[str, ...]) -> Any:
        nonlocal kept
        if isinstance(node, list):
            return [walk(item, inside) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_LOCAL_DEFS):
            name = ref.removeprefix(_LOCAL_DEFS)
            if name in defs and name not in inside:
                siblings = {k: walk(v, inside) for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], (*inside, name)), **siblings}
            kept = True
        return {k: walk(v, inside) for k, v in node.items() if k != "$defs"}

    inlined = walk(schema, ())
    if kept:
        inlined["$defs"] = defs
    return inlined
