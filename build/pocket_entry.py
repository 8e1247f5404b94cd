"""The frozen binary's entry script: the same `pocket` command the Python install gets."""
import multiprocessing

from pocketcli.cli import entry_point

if __name__ == "__main__":
    multiprocessing.freeze_support()  # pocket warmup's worker processes, where they start by spawning
    entry_point()
