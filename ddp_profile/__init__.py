"""ddp-profile: where multi-GPU training step time goes, measured from Nsight Systems traces.

The package is importable without torch, plotly or sqlite-utils: heavy or optional dependencies are
imported inside the modules that need them, so the analysis side works on a machine with no GPU and the
training side works on a GPU machine that lacks the reporting libraries.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_trace"]


def __getattr__(name):  # lazy re-exports keep `import ddp_profile` cheap
    if name == "load_trace":
        from ddp_profile.nsys.loader import load_trace

        return load_trace
    raise AttributeError(name)
