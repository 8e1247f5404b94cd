"""The frozen binary's entry script: the same `pocket` command the Python install gets."""
from pocketcli.cli import entry_point

if __name__ == "__main__":
    entry_point()
