"""The `autoresearch` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from trainer.prepare import TRACKS, PrepareError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An LLM agent that does ML research overnight on a GPT training script.")
console = Console(soft_wrap=True)


TrackOption = Annotated[str, typer.Option(help=f"Track: {', '.join(TRACKS)}.")]
CacheOption = Annotated[Path | None, typer.Option(
    help="Cache directory (default $AUTORESEARCH_CACHE or ~/.cache/autoresearch).")]


@app.command()
def prepare(
    track: TrackOption = "cpu",
    source: Annotated[str | None, typer.Option(
        help="climbmix, stdlib, or a folder of .txt/.jsonl/.parquet (default: the track's own source).")] = None,
    num_shards: Annotated[int | None, typer.Option(
        help="Training shards to download with --source climbmix (default 10).")] = None,
    cache: CacheOption = None,
) -> None:
    """Build a track's data splits and tokenizer (skipped when already prepared from the same source)."""
    _prepare_and_describe(track, source, num_shards, cache)


@app.command()
def run(track: TrackOption = "cpu", cache: CacheOption = None) -> None:
    """The main job. The experiment loop is not built yet: this prepares the track it will run on."""
    _prepare_and_describe(track, None, None, cache)
    console.print("The track is ready; the research loop that trains on it is not part of this version yet.")


def _prepare_and_describe(track: str, source: str | None, num_shards: int | None, cache: Path | None) -> None:
    from trainer.preparation import describe, prepare_track
    try:
        prepared = prepare_track(track, source=source, num_shards=num_shards, cache=cache)
    except PrepareError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from None
    console.print(describe(prepared), highlight=False)


if __name__ == "__main__":
    app()
