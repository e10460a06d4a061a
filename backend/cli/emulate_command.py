"""``pair emulate ollama|lmstudio|hub``: run an emulator in the foreground (developer tool).

The emulators stand in for real Ollama and LM Studio servers, and for Hugging Face's model API,
in tests and demos; the engines' emulators follow their wire protocols and have a timing model
(see ``backend/devtools/emulators``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

from backend.cli import exit_codes
from backend.cli.dev_only import refuse_without_devtools
from backend.core.net import is_loopback

DEFAULT_MODELS = {
    "ollama": "llama3.2,qwen2.5:0.5b,nomic-embed-text",
    "lmstudio": "qwen2.5-7b-instruct,text-embedding-nomic-embed-text-v1.5",
}


def add_parser(commands: Any) -> None:
    """Register ``emulate`` on the ``pair`` subcommand parser."""
    emulate = commands.add_parser(
        "emulate", help="run an Ollama, LM Studio or Hugging Face emulator (tests and demos)"
    )
    emulate.add_argument(
        "engine",
        choices=("ollama", "lmstudio", "hub"),
        help="what to emulate (hub: Hugging Face's model search and downloads)",
    )
    emulate.add_argument("--port", type=_port, default=0, help="TCP port (default: any free one)")
    emulate.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    emulate.add_argument("--models", help="comma-separated installed models (default: a few)")
    emulate.add_argument(
        "--parallel", type=_positive, help="slots per loaded model (Ollama 1, LM Studio 4)"
    )
    emulate.add_argument("--load-delay", type=_seconds, default=0.5, help="seconds per load")
    emulate.add_argument("--token-delay", type=_seconds, default=0.02, help="seconds per token")
    emulate.add_argument(
        "--prompt-token-delay", type=_seconds, default=0.0, help="seconds per prompt token"
    )
    emulate.add_argument(
        "--first-token-delay", type=_seconds, default=0.0, help="seconds before the first token"
    )
    emulate.add_argument(
        "--model-pace",
        action="append",
        default=[],
        metavar="MODEL=TOK_S:SLOTS:LOAD_S:FIRST_S",
        help="one model's own tokens/s, slots, load seconds and seconds to its first token"
        " (empty fields: the engine's; repeat per model), e.g. llama3.2=60:4:2:0.1",
    )
    emulate.add_argument(
        "--weights",
        action="append",
        default=[],
        metavar="MODEL=sha256:HEX",
        help="Ollama: a model's weights digest (/api/show's FROM blob), e.g. to be the same"
        " weights as a llama.cpp GGUF (repeat per model; default: one of its own)",
    )
    emulate.add_argument(
        "--reply-tokens", type=_positive, help="tokens per reply (default: 8-24, seeded)"
    )
    emulate.add_argument(
        "--download-seconds", type=_seconds, default=2.0, help="seconds a pull/download takes"
    )
    emulate.add_argument("--keep-alive", type=_seconds, help="Ollama: default keep_alive seconds")
    emulate.add_argument("--no-jit", action="store_true", help="LM Studio: turn JIT loading off")


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0-65535")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _timing(args: argparse.Namespace) -> Any:
    """The timing model of the options; raises ValueError for a bad ``--model-pace``."""
    from backend.devtools.emulators.generation import TimingModel, parse_model_pace

    try:
        models = dict(parse_model_pace(text) for text in args.model_pace)
    except ValueError as exc:
        raise ValueError(f"--model-pace {exc}") from exc
    return TimingModel(
        args.load_delay,
        args.token_delay,
        args.prompt_token_delay,
        first_token_delay=args.first_token_delay,
        models=models,
    )


def _weights(args: argparse.Namespace) -> dict[str, str]:
    """``--weights`` as model -> digest; raises ValueError for a malformed one."""
    from backend.devtools.emulators.catalog import parse_weights

    try:
        return dict(parse_weights(text) for text in args.weights)
    except ValueError as exc:
        raise ValueError(f"--weights {exc}") from exc


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def run(args: argparse.Namespace) -> int:
    """Serve the chosen emulator until Ctrl+C or SIGTERM."""
    if refuse_without_devtools("emulate"):
        return exit_codes.ERROR
    if args.engine == "hub":
        return _run_hub(args)
    try:
        app = _ollama_app(args) if args.engine == "ollama" else _lmstudio_app(args)
    except ValueError as exc:
        print(f"pair emulate: {exc}", flush=True)
        return exit_codes.USAGE
    name = "Ollama" if args.engine == "ollama" else "LM Studio"
    return _serve(app, args, name)


def _run_hub(args: argparse.Namespace) -> int:
    """Serve the Hugging Face emulator; its downloads are a tiny model written for this run."""
    from backend.devtools.emulators.hub import build_hub_app
    from backend.devtools.tiny_model import MissingDevDependencyError, write_model

    with tempfile.TemporaryDirectory(prefix="pair-hub-") as folder:
        try:
            model = write_model(Path(folder) / "tiny.gguf")
        except MissingDevDependencyError as exc:
            print(f"pair emulate: {exc}", flush=True)
            return exit_codes.ERROR
        return _serve(build_hub_app(model), args, "Hugging Face")


def _serve(app: web.Application, args: argparse.Namespace, name: str) -> int:
    from backend.devtools.emulators.server import EmulatorServer, serve_until_signalled

    server = EmulatorServer(app, args.host, args.port)

    def announce(url: str) -> None:
        print(f"{name} emulator (standing in for {name}) listening on {url}", flush=True)

    if not is_loopback(args.host):
        print(f"warning: the {name} emulator is reachable from the network", flush=True)
    try:
        asyncio.run(serve_until_signalled(server, announce))
    except KeyboardInterrupt:
        return exit_codes.OK
    except OSError as exc:
        print(f"pair emulate: cannot listen on {args.host}:{args.port}: {exc}", flush=True)
        return exit_codes.ERROR
    return exit_codes.OK


def _models(args: argparse.Namespace) -> tuple[str, ...]:
    text = args.models if args.models is not None else DEFAULT_MODELS[args.engine]
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _ollama_app(args: argparse.Namespace) -> web.Application:
    from backend.devtools.emulators.ollama import build_ollama_app
    from backend.devtools.emulators.ollama_scheduler import OllamaLimits
    from backend.devtools.emulators.ollama_state import OllamaConfig

    limits = OllamaLimits(parallel=args.parallel or 1)
    if args.keep_alive is not None:
        limits = OllamaLimits(parallel=limits.parallel, keep_alive_ns=int(args.keep_alive * 1e9))
    config = OllamaConfig(
        models=_models(args),
        weights=_weights(args),
        timing=_timing(args),
        limits=limits,
        reply_tokens=args.reply_tokens,
        pull_seconds=args.download_seconds,
    )
    return build_ollama_app(config, loopback=is_loopback(args.host))


def _lmstudio_app(args: argparse.Namespace) -> web.Application:
    from backend.devtools.emulators.lmstudio import build_lmstudio_app
    from backend.devtools.emulators.lmstudio_state import LmStudioConfig

    config = LmStudioConfig(
        models=_models(args),
        timing=_timing(args),
        parallel=args.parallel or 4,
        reply_tokens=args.reply_tokens,
        jit=not args.no_jit,
        download_seconds=args.download_seconds,
    )
    return build_lmstudio_app(config)
