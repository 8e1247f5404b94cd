"""The mat-vec / mat-mul kernels behind `linear`, one file per weight layout or dot family; dispatch.py picks
which serves a call."""
