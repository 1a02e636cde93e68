"""From a SAM template to the CloudFormation template `sam deploy` hands CloudFormation.

Two steps, each done by the real engine or as the SAM CLI does it:

* `package`: what `sam package` does. Every local artifact (a function's `CodeUri`, a
  layer's `ContentUri`, a state machine's `DefinitionUri`) is zipped or read and uploaded
  (here to moto's S3), and the template points at its `s3://` location.
* `translate`: the AWS::Serverless-2016-10-31 transform, by `samtranslator` (the library
  the SAM CLI and CloudFormation's own transform run), with this stack's parameter values.

The result is plain CloudFormation; `cfn_workarounds` adapts it to what moto's
CloudFormation can create, and the local runtime creates the stack with `create_stack`.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

Upload = Callable[[str, bytes], str]  # (file name, content) -> the s3:// URI it now has

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # a fixed timestamp: the same code gives the same zip
_SKIPPED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache"})


class TemplateError(ValueError):
    """The template cannot be packaged, translated or created as a local stack."""


@dataclass(frozen=True)
class Packaged:
    """A packaged SAM template and where each function's code came from."""

    document: dict[str, Any]
    code_dirs: Mapping[str, Path] = field(default_factory=dict)  # function logical id -> dir


# Parsing YAML, zipping code and translating cost a noticeable part of a runtime's start;
# a process starts many runtimes from the same files, so each result is kept per input.
_PARSED: dict[tuple[str, int, int], dict[str, Any]] = {}
_ZIPPED: dict[tuple[str, tuple[tuple[str, int, int], ...]], bytes] = {}
_TRANSLATED: dict[str, dict[str, Any]] = {}


def read_template(path: str | Path) -> dict[str, Any]:
    """Parse a SAM/CloudFormation template, YAML short tags (`!Ref`, `!Sub`...) included,
    with samtranslator's own YAML reader (as the SAM CLI does)."""
    from samtranslator.yaml_helper import yaml_parse

    file = Path(path).resolve()
    stat = file.stat()
    key = (str(file), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        document = yaml_parse(file.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
            raise TemplateError(f"{path}: not a CloudFormation template (no Resources)")
        _PARSED[key] = document
    return copy.deepcopy(_PARSED[key])


def package(
    document: Mapping[str, Any],
    template_dir: Path,
    upload: Upload,
    *,
    code_root: Path | None = None,
) -> Packaged:
    """What `sam package` does: upload every local artifact and point the template at it.

    Functions' `CodeUri` and layers' `ContentUri` are resolved against `code_root`
    (default: the template's directory), `DefinitionUri` against the template's
    directory. A URI that is already `s3://...` or a Bucket/Key mapping stays as it is.
    """
    packaged: dict[str, Any] = copy.deepcopy(dict(document))
    code_root = code_root or template_dir
    function_globals = (packaged.get("Globals") or {}).get("Function") or {}
    code_dirs: dict[str, Path] = {}
    for logical_id, body in packaged["Resources"].items():
        if not isinstance(body, dict):
            continue
        kind = body.get("Type")
        properties = body.get("Properties")
        if not isinstance(properties, dict):
            properties = body["Properties"] = {}
        if kind == "AWS::Serverless::Function":
            uri = properties.get("CodeUri", function_globals.get("CodeUri"))
            if _is_local(uri):
                directory = (code_root / str(uri)).resolve()
                code_dirs[logical_id] = directory
                properties["CodeUri"] = upload(f"{logical_id}.zip", zip_directory(directory))
        elif kind == "AWS::Serverless::LayerVersion":
            uri = properties.get("ContentUri")
            if _is_local(uri):
                directory = (code_root / str(uri)).resolve()
                properties["ContentUri"] = upload(f"{logical_id}.zip", zip_directory(directory))
        elif kind == "AWS::Serverless::StateMachine":
            uri = properties.get("DefinitionUri")
            if _is_local(uri):
                file = template_dir / str(uri)
                if not file.is_file():
                    raise TemplateError(f"{logical_id}: DefinitionUri {uri} is not a file")
                properties["DefinitionUri"] = upload(file.name, file.read_bytes())
    return Packaged(packaged, code_dirs)


def _is_local(uri: object) -> bool:
    return isinstance(uri, str) and not uri.startswith("s3://")


def zip_directory(directory: Path) -> bytes:
    """The directory's files as a zip, as `sam package` uploads a CodeUri (caches left out)."""
    if not directory.is_dir():
        raise TemplateError(f"code directory {directory} does not exist")
    files = [
        file
        for file in sorted(directory.rglob("*"))
        if file.is_file() and not _SKIPPED_PARTS & set(file.relative_to(directory).parts)
    ]
    stats = [(file, file.stat()) for file in files]
    key = (
        str(directory),
        tuple((str(file), stat.st_mtime_ns, stat.st_size) for file, stat in stats),
    )
    if key not in _ZIPPED:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in files:
                info = zipfile.ZipInfo(file.relative_to(directory).as_posix(), _ZIP_TIME)
                info.external_attr = 0o644 << 16
                archive.writestr(info, file.read_bytes(), zipfile.ZIP_DEFLATED)
        _ZIPPED[key] = buffer.getvalue()
    return _ZIPPED[key]


def content_key(name: str, content: bytes) -> str:
    """The S3 key `sam package` would give an artifact: named by its content's hash."""
    suffix = Path(name).suffix
    return hashlib.md5(content, usedforsecurity=False).hexdigest() + suffix


def translate(
    document: Mapping[str, Any],
    parameters: Mapping[str, Any],
    *,
    region: str,
    account_id: str,
) -> dict[str, Any]:
    """The AWS::Serverless-2016-10-31 transform of a packaged template, by samtranslator.

    As `samtranslator.translator.transform.transform` runs it, with a session in `region`
    (SAM builds ARNs with its partition) and no managed-policy names to look up: a
    function's `Policies` may use policy templates, statements and ARNs, not bare names.
    """
    from samtranslator.metrics.metrics import DummyMetricsPublisher, Metrics
    from samtranslator.model.exceptions import InvalidDocumentException
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator
    from samtranslator.utils.py27hash_fix import (
        to_py27_compatible_template,
        undo_mark_unicode_str_in_template,
    )

    values: dict[str, Any] = {
        **parameters,
        "AWS::Region": region,
        "AWS::AccountId": account_id,
        "AWS::Partition": "aws",
    }
    key = json.dumps([document, values], sort_keys=True, default=str)
    if key not in _TRANSLATED:
        template = copy.deepcopy(dict(document))
        to_py27_compatible_template(template, values)
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
        )
        metrics = Metrics("ServerlessTransform", DummyMetricsPublisher())
        translator = Translator(None, Parser(), boto_session=session, metrics=metrics)
        try:
            translated = translator.translate(
                template, parameter_values=values, get_managed_policy_map=dict
            )
        except InvalidDocumentException as error:
            causes = "; ".join(str(cause) for cause in error.causes) or str(error)
            raise TemplateError(f"SAM cannot translate the template: {causes}") from error
        finally:
            metrics.publish()  # to nobody; unpublished metrics are reported at exit
        _TRANSLATED[key] = undo_mark_unicode_str_in_template(translated)
    return copy.deepcopy(_TRANSLATED[key])
