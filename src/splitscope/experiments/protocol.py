"""The fixed training protocol (METHODS §5.11) and the validation holdout.

One protocol is held fixed across backbones and pools and written into every run record:
preprocessing (8-bit grey, resized to S×S bicubic without keeping the aspect, the scan's
thumbnail rule), normalisation, augmentation, optimizer, schedule, epochs, batch size and the
checkpoint selection rule. ``frozen`` trains a linear head on backbone features computed once
(no augmentation: the features are cached); ``finetune`` trains everything with augmentation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from splitscope.errors import InputError

POLICIES = ("frozen", "finetune")
AUGMENTATIONS = ("flip,crop", "flip", "crop", "none")
_AUGMENTATION_TEXT = {"flip": "random horizontal flip (p 0.5)",
                      "crop": "random shift up to 1/16 of the side (reflect padding)"}


@dataclass(frozen=True)
class Protocol:
    """Training protocol; :meth:`to_dict` is the recorded form."""

    image_size: int = 64
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    val_share: float = 0.15
    interpolation: str = "bicubic"
    augmentation: str = "flip,crop"
    amp: bool = False  # mixed precision (CUDA only)
    channels_last: bool = False  # channels-last memory format (CUDA only)

    def __post_init__(self) -> None:
        if self.augmentation not in AUGMENTATIONS:
            raise InputError(f"augmentation {self.augmentation!r} not one of "
                             f"{', '.join(AUGMENTATIONS)}")
        if self.epochs < 1 or self.batch_size < 1 or self.image_size < 8:
            raise InputError(f"epochs and batch size must be ≥ 1 and image size ≥ 8; got "
                             f"{self.epochs}, {self.batch_size}, {self.image_size}")
        if not 0 < self.val_share < 0.5:
            raise InputError(f"validation share must be in (0, 0.5); got {self.val_share}")

    def to_dict(self) -> dict:
        return {**asdict(self),
                "preprocessing": f"8-bit grey, resized to {self.image_size}² "
                                 f"{self.interpolation} (aspect not kept)",
                "normalisation": "(x / 255 − 0.5) / 0.25",
                "augmentation": {"finetune": self.augmentation_text(),
                                 "frozen": "none (features computed once and cached)"},
                "precision": "mixed (float16 autocast, gradient scaling)" if self.amp
                             else "float32",
                "optimizer": "AdamW (betas 0.9, 0.999)",
                "schedule": "cosine decay over all updates, no warm-up",
                "loss": "cross-entropy",
                "batching": "shuffled per epoch (seeded), last partial minibatch kept",
                "selection": "epoch of maximum validation balanced accuracy; ties: the "
                             "earliest",
                "validation": f"stratified holdout of {self.val_share:.0%} of the pool, "
                              f"group-disjoint when groups are known (a row without a "
                              f"group is its own group), seeded by the run seed"}

    def augmentation_text(self) -> str:
        if self.augmentation == "none":
            return "none"
        parts = [_AUGMENTATION_TEXT[a] for a in self.augmentation.split(",")]
        return " and ".join(parts) + ", seeded per epoch"


def validation_holdout(labels: np.ndarray, groups: np.ndarray | None, share: float,
                       seed: int) -> tuple[np.ndarray, dict]:
    """Boolean mask of the validation rows of a pool, and how it was drawn.

    Stratified on ``labels``. With ``groups``, group-disjoint: scikit-learn
    ``StratifiedGroupKFold`` with ``round(1 / share)`` shuffled folds, the first fold held out
    (its share is recorded; it is near ``share`` rather than equal to it); a row without a
    group (missing value) is a group of its own, so disjointness holds for every known group
    and the number of such rows is recorded. Without groups,
    ``train_test_split(stratify=labels)`` of exactly ``share``.
    """
    from sklearn.model_selection import StratifiedGroupKFold, train_test_split

    from splitscope.evaluation.uncertainty import singleton_groups

    n = len(labels)
    idx = np.arange(n)
    counts = np.unique(labels, return_counts=True)[1]
    if n < 4 or counts.min() < 2:
        raise InputError(f"the pool has {n} rows and a class with {counts.min()} row(s): too "
                         f"few to hold out a stratified validation set")
    known = groups is not None
    singletons = 0
    if known:
        groups, singletons = singleton_groups(groups)
    if known and len(set(groups)) >= round(1 / share):
        k = round(1 / share)
        folds = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
        _, val = next(folds.split(idx, labels, groups))
        rule = f"StratifiedGroupKFold(n_splits={k}, shuffle, seed {seed}), first fold"
    else:
        _, val = train_test_split(idx, test_size=share, stratify=labels, random_state=seed)
        rule = f"train_test_split(test_size={share}, stratify=label, seed {seed})"
    mask = np.zeros(n, dtype=bool)
    mask[val] = True
    disjoint = bool(known and "Group" in rule)
    info = {"rule": rule, "rows": int(mask.sum()), "share": float(mask.mean()),
            "group_disjoint": disjoint, "seed": int(seed)}
    if known:
        info["rows_without_group"] = singletons
        info["groups"] = (f"group-disjoint over {len(set(groups)) - singletons} known groups; "
                          f"{singletons} row(s) without a group, each its own group"
                          if disjoint else f"not group-disjoint: {len(set(groups))} groups, "
                          f"fewer than the {round(1 / share)} folds")
    return mask, info
