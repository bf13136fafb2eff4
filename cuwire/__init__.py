"""cuwire: CUDA remoting."""

__version__ = "0.1.0"

# How cuwire starts a Python child of its own (`[sys.executable, *SAFE_PATH, "-m", ...]`): `-P` keeps the
# current directory off sys.path, so the child imports the cuwire its parent runs, never a cuwire/ folder
# where the user stands (a checkout's, whose compiled parts an installed package has and it lacks).
SAFE_PATH = ("-P",)
