"""A bare one-command typer app: what typer itself costs at start-up, for bench/startup.py to compare mam with.

Run: python3 bench/bare_typer.py --help
"""

import typer

app = typer.Typer()


@app.command()
def hello(name: str = "world") -> None:
    """Say hello."""
    print(f"hello {name}")


if __name__ == "__main__":
    app()
