"""The adapters package: optional extras, lazy imports, public names."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import types

import pytest

import slopolicy.adapters
import slopolicy.adapters.calls
import slopolicy.adapters.common
import slopolicy.adapters.llamacpp
import slopolicy.adapters.metrics
import slopolicy.adapters.openai
import slopolicy.adapters.tgi
import slopolicy.adapters.vllm
from slopolicy.adapters import EngineError, EngineFault, engine_error_response
from slopolicy.adapters.common import fault_from_status, parse_retry_after

MODULES = [
    slopolicy.adapters,
    slopolicy.adapters.calls,
    slopolicy.adapters.common,
    slopolicy.adapters.llamacpp,
    slopolicy.adapters.metrics,
    slopolicy.adapters.openai,
    slopolicy.adapters.tgi,
    slopolicy.adapters.vllm,
]


@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [
        ("slopolicy.adapters.openai", "openai", "openai"),
        ("slopolicy.adapters.tgi", "huggingface_hub", "tgi"),
        ("slopolicy.adapters.metrics", "prometheus_client", "prometheus"),
        ("slopolicy.adapters.metrics", "httpx", "prometheus"),
    ],
)
def test_importing_an_adapter_without_its_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, hidden: str, extra: str
) -> None:
    for name in [name for name in sys.modules if name.startswith(f"{hidden}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, hidden, None)  # a None entry makes `import` fail
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ImportError, match=re.escape(f"pip install 'slopolicy[{extra}]'")):
        importlib.import_module(module)


def test_slopolicy_imports_no_adapter_and_the_vllm_adapter_no_vllm() -> None:
    code = (
        "import sys, slopolicy, slopolicy.runtime\n"
        "assert not [m for m in sys.modules if m.startswith('slopolicy.adapters')]\n"
        "assert not [m for m in ('openai', 'huggingface_hub', 'prometheus_client') "
        "if m in sys.modules]\n"
        "import slopolicy.adapters.vllm\n"
        "assert 'vllm' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_lists_exactly_the_public_names(module: types.ModuleType) -> None:
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
        and not isinstance(value, types.ModuleType)
    }
    assert isinstance(module.__all__, tuple)
    assert all(getattr(module, name) is not None for name in module.__all__)
    assert defined <= set(module.__all__) | {"logger", "T"}


def test_engine_statuses_map_to_faults() -> None:
    cases = {
        503: EngineFault.OVERLOADED,
        429: EngineFault.RATE_LIMITED,
        408: EngineFault.TIMEOUT,
        504: EngineFault.TIMEOUT,
        400: EngineFault.INVALID_REQUEST,
        422: EngineFault.INVALID_REQUEST,
        500: EngineFault.FAILED,
        None: EngineFault.FAILED,
    }
    for status, fault in cases.items():
        assert fault_from_status(status, "x").fault is fault
    too_long = fault_from_status(400, "x", param="input_tokens")
    assert too_long.fault is EngineFault.PROMPT_TOO_LONG
    assert (too_long.outcome.value, too_long.http_status) == ("cancelled", 413)


def test_engine_error_responses_are_openai_errors() -> None:
    status, headers, body = engine_error_response(
        EngineError(EngineFault.OVERLOADED, "busy"), default_retry_after=1.5
    )
    assert (status, headers["retry-after"], headers["x-slopolicy-reason"]) == (
        503,
        "2",
        "engine_overloaded",
    )
    assert body == {
        "error": {
            "message": "busy",
            "type": "service_unavailable_error",
            "param": None,
            "code": "engine_overloaded",
        }
    }
    status, headers, body = engine_error_response(
        EngineError(EngineFault.PROMPT_TOO_LONG, "long", param="input_tokens")
    )
    assert (status, body["error"]["type"], body["error"]["param"]) == (
        413,
        "invalid_request_error",
        "input_tokens",
    )
    assert "retry-after" not in headers
    assert repr(EngineError(EngineFault.FAILED, "x")) == "EngineError('engine_failed', 'x')"


def test_retry_after_in_seconds_only() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("-1") is None
    assert parse_retry_after(None) is None
