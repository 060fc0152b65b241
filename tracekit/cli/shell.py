"""`tracekit sql INPUT...` without a query: a prompt where each line is a query, with history.

On a terminal, lines are read with readline (arrow keys, Ctrl-R) and kept in the history file; from a pipe, each
line of standard input is a query and the first failing one stops the run (exit code 2), like a script.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
from rich.console import Console

from tracekit import schema
from tracekit.engine import catalog
from tracekit.errors import InputError
from tracekit.output.frames import print_frame
from tracekit.query.database import TraceDatabase

HELP = """Each line is a SQL query (DuckDB dialect) over the tables and analyses. Commands:
  .tables            the tables and their row counts
  .schema [TABLE]    columns of every table, or of one, with types and units
  .queries           the analyses (each is also a view: select * from op_summary)
  .macros            the table and scalar macros (select * from descendants(0, 1234))
  .help              this text
  .quit              leave (or Ctrl-D)"""


def history_file() -> Path:
    """Where the prompt's history is kept: $TRACEKIT_HISTORY, else under $XDG_STATE_HOME (~/.local/state)."""
    if os.environ.get("TRACEKIT_HISTORY"):
        return Path(os.environ["TRACEKIT_HISTORY"])
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state / "tracekit" / "sql_history"


def terminal_lines(prompt: str) -> Iterator[str]:
    """Lines typed at the prompt, with readline editing and persistent history."""
    try:
        import readline
    except ImportError:  # not on every platform; the prompt still works, without history
        readline = None
    path = history_file()
    if readline is not None:
        try:
            readline.read_history_file(path)
        except OSError:
            pass
    try:
        while True:
            try:
                yield input(prompt)
            except EOFError:
                print()
                return
            except KeyboardInterrupt:  # Ctrl-C drops the line being typed, as in a shell
                print()
    finally:
        if readline is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                readline.set_history_length(10_000)
                readline.write_history_file(path)
            except OSError:
                pass


def run_shell(db: TraceDatabase, console: Console, max_rows: int, interactive: bool | None = None,
              wide: bool = False) -> None:
    """Read queries until the end of input. At a terminal an error is printed and the prompt goes on; from a pipe
    it is raised (the command exits 2)."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    lines = terminal_lines("tracekit> ") if interactive else (line.rstrip("\n") for line in sys.stdin)
    if interactive:
        console.print(f"tracekit SQL over {db.source}. [dim].help for commands, Ctrl-D to leave[/dim]")
    for line in lines:
        text = line.strip().rstrip(";").strip()
        if not text or text.startswith("--"):
            continue
        if text in (".quit", ".exit"):
            break
        try:
            answer_line(db, text, console, max_rows, wide)
        except InputError as exc:
            if not interactive:
                raise
            console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)


def answer_line(db: TraceDatabase, text: str, console: Console, max_rows: int, wide: bool = False) -> None:
    command, _, argument = text.partition(" ")
    commands: dict[str, Callable[[], None]] = {
        ".help": lambda: console.print(HELP, markup=False),
        ".tables": lambda: print_frame(console, db.sql(
            " union all ".join(f"select '{n}' as table_name, count(*) as rows from {n}" for n in db.tables())), 100),
        ".schema": lambda: print_frame(console, schema_frame(argument.strip() or None), 1000),
        ".queries": lambda: print_frame(console, queries_frame(), 1000),
        ".macros": lambda: print_frame(console, macros_frame(db), 1000),
    }
    if command.startswith("."):
        if command not in commands:
            raise InputError(f"{command}: unknown command (.help lists them)")
        commands[command]()
        return
    print_frame(console, db.sql(text), max_rows, wide=wide)


def schema_frame(table: str | None) -> pl.DataFrame:
    if table is not None and table not in schema.TABLES:
        raise InputError(f"{table}: no such table (one of: {', '.join(schema.TABLES)})")
    return pl.DataFrame([{"table": t.name, "column": c.name, "type": str(c.type), "unit": c.unit, "meaning": c.doc}
                         for t in schema.TABLES.values() if table in (None, t.name) for c in t.columns])


def queries_frame() -> pl.DataFrame:
    return pl.DataFrame([{"analysis": name, "question": catalog.load_query(name).question}
                         for name in catalog.available()])


def macros_frame(db: TraceDatabase) -> pl.DataFrame:
    """The public macros of queries/lib, as their files' headers document them (private `_helpers` left out)."""
    rows = []
    for macro, doc in catalog.public_macros().items():
        parameters, _, meaning = doc.partition(": ")
        rows.append({"macro": macro, "returns": catalog.macro_returns(macro), "parameters": parameters, "file": f"queries/{catalog.macro_files()[macro]}.sql",
                     "meaning": meaning})
    return pl.DataFrame(rows)
