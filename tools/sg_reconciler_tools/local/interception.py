"""Faults and observers around moto's answers, through botocore's public `before-send` event.

moto answers every botocore client in the process from its stubber, a `before-send`
handler; `install_dispatcher` (run at import) puts `_dispatch` in its place, which calls
the stubber unchanged inside the interceptors an action has. Nothing here changes a moto
model: what moto lacks is patched in `moto_hooks`. `faults`, `rate_limit`, `model_time`
and `monitor` build on `intercept_api_call`; so do the hooks that model an AWS fact in
the request (`moto_hooks.patch_atomic_writes`, the ENI prefixes).
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, cast

from sg_reconciler_tools.local.patching import HookError, Patch, together

# EC2 calls that change security-group rules or their tags (ownership lives in tags).
EC2_WRITE_OPERATIONS: Final = (
    "AuthorizeSecurityGroupIngress",
    "AuthorizeSecurityGroupEgress",
    "RevokeSecurityGroupIngress",
    "RevokeSecurityGroupEgress",
    "ModifySecurityGroupRules",
    "UpdateSecurityGroupRuleDescriptionsIngress",
    "UpdateSecurityGroupRuleDescriptionsEgress",
    "CreateTags",
    "DeleteTags",
    "DeleteSecurityGroup",
)
# Of these, the ones the app makes (the steps and the janitor).
APP_EC2_WRITES: Final = (
    "AuthorizeSecurityGroupIngress",
    "RevokeSecurityGroupIngress",
    "ModifySecurityGroupRules",
    "CreateTags",
    "DeleteTags",
)


Proceed = Callable[[], Any]
Interceptor = Callable[[str, str, Proceed], Any]  # (service, operation, proceed) -> response

ATOMIC_LAYER: Final = -1  # innermost of all: holds the lock only around moto's own work
OBSERVER_LAYER: Final = 0  # sees the call as moto applied it
FAULT_LAYER: Final = 1  # outside observers: a "before" fault never reaches moto

# Our service name -> (botocore's hyphenated service id, as in event names; its protocol).
SERVICES: Final[Mapping[str, tuple[str, str]]] = {
    "ec2": ("ec2", "ec2"),
    "elbv2": ("elastic-load-balancing-v2", "query"),
    "dynamodb": ("dynamodb", "json"),
    "stepfunctions": ("sfn", "json"),
    "lambda": ("lambda", "rest-json"),
}
_BY_SERVICE_ID: Final = {service_id: name for name, (service_id, _) in SERVICES.items()}

_chain_lock = threading.Lock()
_chains: dict[tuple[str, str], list[tuple[int, int, Interceptor]]] = {}
_sequence = itertools.count()
_serving = threading.local()


class AwsError(Exception):
    """An AWS error answer: what `proceed()` raises when moto answered with one (`response`),
    and what an interceptor raises to fail a call (rendered in the service's protocol).
    """

    def __init__(self, code: str, message: str, status: int = 400, response: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status, self.response = code, message, status, response


def intercept_api_call(
    service: str, operation: str, interceptor: Interceptor, *, layer: int = FAULT_LAYER
) -> Patch:
    """Run `interceptor` around every HTTP attempt of one AWS API action moto serves.

    Every botocore client in the process sends through `before-send`, where `_dispatch`
    stands in moto's stubber's place. `proceed()` returns moto's answer or raises `AwsError`;
    an error an interceptor raises becomes the service's error answer, so botocore's retries
    and the caller see an AWS error. Interceptors nest by layer (higher is outer), then by
    installation.
    """
    if service not in SERVICES:
        raise ValueError(f"no hook for service {service!r}; known: {', '.join(SERVICES)}")
    if operation not in _operations(service):
        raise ValueError(f"{service} has no API action {operation!r} (botocore's model)")
    key = (service, operation)
    entry = (layer, next(_sequence), interceptor)
    with _chain_lock:
        chain = _chains.setdefault(key, [])
        chain.append(entry)
        chain.sort(key=lambda item: (item[0], item[1]))

    def undo() -> None:
        with _chain_lock:
            chain.remove(entry)
            if not chain:
                del _chains[key]

    return Patch(f"{service}:{operation} interceptor", undo)


def intercept_each(
    service: str, operations: Iterable[str], interceptor: Interceptor, *, layer: int = FAULT_LAYER
) -> Iterator[Patch]:
    """`intercept_api_call` for each operation, yielded as installed (for `together` or a
    `PatchSet`, which undo what was installed if a later one fails)."""
    for operation in operations:
        yield intercept_api_call(service, operation, interceptor, layer=layer)


@functools.cache
def _operations(service: str) -> frozenset[str]:
    import botocore.session

    return frozenset(botocore.session.get_session().get_service_model(service).operation_names)


def interceptors(service: str, operation: str) -> int:
    """How many interceptors one action has now."""
    with _chain_lock:
        return len(_chains.get((service, operation), ()))


def current_request_params() -> dict[str, Any]:
    """Inside an interceptor: the parameters of the request being sent (a query/EC2 request's
    form-encoded body, as a dict of lists).
    """
    request = getattr(_serving, "request", None)
    if request is None:
        return {}
    body = request.body
    text = body.decode() if isinstance(body, bytes) else str(body or "")
    return urllib.parse.parse_qs(text) if "=" in text and not text.startswith("{") else {}


def _dispatch(event_name: str, request: Any, **kwargs: Any) -> Any:
    """botocore `before-send` handler in place of moto's stubber (see `install_dispatcher`)."""
    from moto.core.models import botocore_stubber

    parts = event_name.split(".")
    service = _BY_SERVICE_ID.get(parts[1]) if len(parts) == 3 else None
    with _chain_lock:
        chain = [item[2] for item in _chains.get((service or "", parts[-1]), ())]
    if service is None or not chain:
        return botocore_stubber(event_name=event_name, request=request, **kwargs)
    operation = parts[-1]

    def call(index: int) -> Any:
        if index < 0:
            response = botocore_stubber(event_name=event_name, request=request, **kwargs)
            if response is not None and response.status_code >= 300:
                raise _answered_error(SERVICES[service][1], response)
            return response
        return chain[index](service, operation, lambda: call(index - 1))

    saved = getattr(_serving, "request", None)
    _serving.request = request
    try:
        return call(len(chain) - 1)
    except AwsError as error:
        if error.response is not None:
            return error.response
        return _error_response(service, request.url, error)
    finally:
        _serving.request = saved


def _answered_error(protocol: str, response: Any) -> AwsError:
    """moto's error answer, read by botocore's parser of the service's protocol."""
    from botocore.parsers import create_parser

    answer = {"status_code": response.status_code, "headers": response.headers}
    # No output shape: botocore reads an error answer (status >= 300) without one.
    parsed = create_parser(protocol).parse({**answer, "body": response.content}, cast(Any, None))
    error = parsed.get("Error") or {}
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    return AwsError(code, message, response.status_code, response)


def _error_response(service: str, url: str, error: AwsError) -> Any:
    """An AWS error answer in the service's protocol, as botocore's parsers read it."""
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    code, message = html.escape(error.code), html.escape(error.message)
    protocol, request_id = SERVICES[service][1], str(uuid.uuid4())
    headers = {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}
    if protocol == "ec2":
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message>"
            f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
        )
    elif protocol == "query":
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}"
            f"</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    elif protocol == "rest-json":
        headers.update({"Content-Type": "application/json", "x-amzn-ErrorType": error.code})
        body = json.dumps({"Type": "User", "message": error.message})
    else:
        headers["Content-Type"] = "application/x-amz-json-1.0"
        body = json.dumps({"__type": error.code, "message": error.message})
    # a dict, as moto's stubber passes: AWSResponse makes it case-insensitive
    return AWSResponse(url, error.status, headers, MockRawResponse(body))  # type: ignore[arg-type]


def install_dispatcher() -> None:
    """Put `_dispatch` where moto put its stubber: in botocore's `BUILTIN_HANDLERS` and boto3's
    default session (a client made before this keeps moto's stubber: import this first).

    Tooling: moto answers in botocore's `before-send` and offers no place around its answer
    for faults and observers; `_dispatch` calls moto's stubber unchanged.
    """
    import boto3
    from botocore.handlers import BUILTIN_HANDLERS
    from moto.core.models import botocore_stubber

    for index, entry in enumerate(BUILTIN_HANDLERS):
        if entry[1] is botocore_stubber:
            BUILTIN_HANDLERS[index] = ("before-send", _dispatch)
    if not any(entry[1] is _dispatch for entry in BUILTIN_HANDLERS):
        raise HookError("moto's stubber is not among botocore's BUILTIN_HANDLERS (moto upgraded?)")
    session = boto3.DEFAULT_SESSION
    if session is not None:
        session.events.unregister("before-send", cast(Any, botocore_stubber))
        session.events.register("before-send", _dispatch)


WriteListener = Callable[[str, BaseException | None], None]  # (operation, error or None)


def on_ec2_write(listener: WriteListener) -> Patch:
    """Call `listener` after every EC2 security-group write that reached moto, returned or
    raised (a write can apply and still fail); a "before" fault never reaches it.
    """

    def observe(service: str, operation: str, proceed: Proceed) -> Any:
        try:
            result = proceed()
        except BaseException as error:
            listener(operation, error)
            raise
        listener(operation, None)
        return result

    return together(
        "EC2 write listener",
        intercept_each("ec2", EC2_WRITE_OPERATIONS, observe, layer=OBSERVER_LAYER),
    )


install_dispatcher()
