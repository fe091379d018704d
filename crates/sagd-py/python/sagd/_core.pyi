"""Type stubs of the extension module `sagd._core` (the Rust side; use `sagd.glmm`, `sagd.fit`,
`sagd.minimize` and `sagd.deconvolve`, which check their arguments and wrap these results). Every
argument is by name; `tests/test_core_stub.py` holds these stubs to the extension's signatures."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

__version__: str

def fit_glmm(
    *,
    family: str,
    y: npt.NDArray[np.float64],
    x: npt.NDArray[np.float64],
    groups: List[npt.NDArray[np.int64]],
    zs: List[npt.NDArray[np.float64]],
    correlated: List[bool],
    trials: Optional[npt.NDArray[np.float64]],
    x_names: List[str],
    terms: List[Tuple[str, List[str]]],
    seed: int = ...,
    threads: Optional[int] = ...,
    max_msteps: Optional[int] = ...,
    progress: Optional[Callable[[int], Any]] = ...,
    method: str = ...,
    reml: bool = ...,
    nodes: Optional[int] = ...,
    ranef_draws: int = ...,
    offset: Optional[npt.NDArray[np.float64]] = ...,
    weights: Optional[npt.NDArray[np.float64]] = ...,
    profile: Optional[float] = ...,
    simulate: Optional[int] = ...,
    bootstrap: Optional[int] = ...,
    bootstrap_progress: Optional[Callable[[int], Any]] = ...,
    satterthwaite: bool = ...,
    kenward_roger: bool = ...,
    type3: Optional[Tuple[List[str], npt.NDArray[np.float64], List[Tuple[int, int]]]] = ...,
    ls_means: Optional[Tuple[List[str], List[str], npt.NDArray[np.float64]]] = ...,
    ls_means_pairwise: bool = ...,
    ls_means_level: float = ...,
    checkpoint: Optional[str] = ...,
    checkpoint_every: int = ...,
    interrupt_after: Optional[int] = ...,
) -> Dict[str, Any]: ...
def glmm_loglik(
    *,
    family: str,
    y: npt.NDArray[np.float64],
    x: npt.NDArray[np.float64],
    groups: List[npt.NDArray[np.int64]],
    zs: List[npt.NDArray[np.float64]],
    correlated: List[bool],
    trials: Optional[npt.NDArray[np.float64]],
    theta: List[float],
    seed: int = ...,
    offset: Optional[npt.NDArray[np.float64]] = ...,
    weights: Optional[npt.NDArray[np.float64]] = ...,
) -> Tuple[float, float, str]: ...
def bootstrap_lrt(
    *,
    null: Dict[str, Any],
    alt: Dict[str, Any],
    theta_null: List[float],
    theta_alt: List[float],
    draws: int,
    seed: int = ...,
    threads: Optional[int] = ...,
    progress: Optional[Callable[[int], Any]] = ...,
    method: str = ...,
    nodes: Optional[int] = ...,
    max_msteps: Optional[int] = ...,
    checkpoint: Optional[str] = ...,
    checkpoint_every: int = ...,
    interrupt_after: Optional[int] = ...,
) -> Tuple[List[float], List[Tuple[int, str]]]: ...
def random_reductions(
    *,
    terms: List[Tuple[str, List[str], bool]],
) -> List[Tuple[str, int, int]]: ...
def least_squares_loglik(
    *,
    y: npt.NDArray[np.float64],
    x: npt.NDArray[np.float64],
    offset: Optional[npt.NDArray[np.float64]] = ...,
    weights: Optional[npt.NDArray[np.float64]] = ...,
    reml: bool = ...,
) -> Tuple[float, int]: ...
def simulate_glmm(
    *,
    model: Dict[str, Any],
    theta: List[float],
    draws: int,
    seed: int = ...,
    conditional: bool = ...,
    threads: Optional[int] = ...,
) -> List[List[float]]: ...
def fit_function(
    *,
    f: Callable[[np.ndarray, np.ndarray, np.ndarray], Tuple[Any, Any, Any]],
    theta0: npt.NDArray[np.float64],
    n_points: int,
    latent_dim: int,
    seed: int = ...,
    threads: Optional[int] = ...,
    max_msteps: Optional[int] = ...,
    progress: Optional[Callable[[int], Any]] = ...,
) -> Dict[str, Any]: ...
def minimize(
    *,
    f: Callable[[np.ndarray, np.ndarray], Tuple[Any, Any, Any]],
    theta0: npt.NDArray[np.float64],
    xi0: npt.NDArray[np.float64],
    n_chains: int,
    iterations: int,
    schedule: str = ...,
    c1: float = ...,
    c2: float = ...,
    c: float = ...,
    alpha0: float = ...,
    step_size: Optional[float] = ...,
    chain_length: Optional[int] = ...,
    learning_rate: Optional[float] = ...,
    scheme: str = ...,
    gamma: float = ...,
    seed: int = ...,
    threads: Optional[int] = ...,
    progress: Optional[Callable[[int], Any]] = ...,
) -> Dict[str, Any]: ...
def deconvolve(
    *,
    x: npt.NDArray[np.float64],
    noise_sd: float,
    holdout: float,
    methods: List[str],
    seed: int = ...,
    threads: Optional[int] = ...,
    pretrain_epochs: Optional[int] = ...,
    finetune_epochs: Optional[int] = ...,
    progress: Optional[Callable[[int], Any]] = ...,
    preset: str = ...,
    device: str = ...,
) -> Dict[str, Any]: ...
