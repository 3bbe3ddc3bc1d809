"""A PyTorch plug-in's step as a timeable workload, remedies derived from the same step.

The builder (``build(device, **sizes) -> plugin.TorchStep``) runs in :meth:`setup`,
so building the model and the data is timed as cold start. From the one step it
returns, the variants are derived as for the seeds (:mod:`.torch_cases`):

- ``eager``: the step as written, its batch placed on the device once, the loss read
  back every ``TorchStep.loss_read_every`` steps;
- ``read_loss_every_step`` / ``read_loss_every_1000``: the loss read that often
  (``not_applicable`` when that is the user's own schedule);
- ``copy_data_each_step``: the batch kept in host memory and copied every step
  (``not_applicable`` for a step without data);
- ``compile``: ``torch.compile(step, mode="reduce-overhead")``;
- ``cuda_graph`` (CUDA only): the step captured in a CUDA graph after three warm-up
  steps on a side stream and replayed, its optimizer switched to ``capturable``
  (PyTorch docs, "CUDA Graphs", whole-network capture);
- ``tf32``: the eager step with TF32 allowed (set by the runner around the point);
- the ``unsynced`` timing: the harness's.
"""

from __future__ import annotations

import torch

from crossover_study.plugin import TorchStep
from crossover_study.study.applicability import require
from crossover_study.study.program_traits import loss_kind
from crossover_study.workloads import loss_read_every as _loss_read_every
from crossover_study.workloads.torch_base import TorchWorkload, check_torch_variant

#: The traits (``program_traits.KINDS``) of a plug-in's program before its builder ran.
PLUGIN_KIND = frozenset({"plugin", "one_device"})


class TorchPluginWorkload(TorchWorkload):
    """A plug-in's :class:`~crossover_study.plugin.TorchStep` as the harness's
    Workload. ``builder``: the plug-in's entry point; ``device``: ``cpu`` or ``cuda``;
    ``sizes``: the point's axes (passed to the builder by keyword).

    Raises NotApplicable (constructor, before anything is built) for a variant of the
    other framework, a replica variant, ``cuda_graph`` off CUDA, ``tf32`` off a GPU;
    Unavailable for ``compile`` without a compiler; NotApplicable from :meth:`setup`
    for a variant this step cannot have (its loss already read on that schedule, no data
    to copy); TypeError from :meth:`setup` when the builder returns something else than
    a TorchStep or the step returns something else than a tensor.
    """

    def __init__(self, builder, device: str, sizes: dict[str, int], variant: str = "eager"):
        check_torch_variant(variant, device, PLUGIN_KIND)
        self.builder = builder
        self.copy_data = variant == "copy_data_each_step"
        self.variant = variant
        self.device = torch.device("cuda:0" if device == "cuda" else "cpu")
        self.device_class = device
        self.sizes = dict(sizes)
        self.seed = 1234
        self.step_index = 0
        self._loss = None
        self._last_loss = None
        self.program: TorchStep | None = None

    def setup(self) -> None:
        torch.manual_seed(self.seed)
        program = self.builder(device=self.device, **self.sizes)
        if not isinstance(program, TorchStep):
            raise TypeError(
                f"a torch plug-in's builder must return crossover_study.plugin.TorchStep, "
                f"got {type(program).__name__}"
            )
        built = {"step"} | loss_kind(program.loss_read_every)
        if not program.data:
            built.add("no_data")
        require(self.variant, "torch", self.device_class, PLUGIN_KIND | built)
        self.program = program  # its optimizer's parameters: measure.same_program
        self.loss_read_every = _loss_read_every(program, self.variant)
        self.host_data = tuple(torch.as_tensor(d) for d in program.data)
        self.data = self.host_data if self.copy_data else tuple(self._placed(self.host_data))
        self.train_step = program.step
        if self.variant == "cuda_graph" and program.optimizer is not None:
            for group in program.optimizer.param_groups:
                group["capturable"] = True  # state on the device, no host sync in step()
        self._make_step(*self._batch(), fixed_inputs=not self.copy_data)

    def _placed(self, tensors):
        return (t.to(self.device) for t in tensors)

    def _batch(self) -> tuple[torch.Tensor, ...]:
        """This step's batch on the device: the tensors placed once, or copied now."""
        return tuple(self._placed(self.host_data)) if self.copy_data else self.data

    def run(self, n_steps: int) -> None:
        every = self.loss_read_every
        for _ in range(n_steps):
            loss = self.step(*self._batch())
            if self.step_index == 0:
                _check_loss(loss)
            self.step_index += 1
            self._last_loss = loss
            if every and self.step_index % every == 0:
                self._loss = loss.item()


def _check_loss(loss) -> None:
    """Raise TypeError unless ``loss`` (what the step returned) is a one-element tensor."""
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = (
            type(loss).__name__
            if not isinstance(loss, torch.Tensor)
            else f"{loss.numel()}-element tensor"
        )
        raise TypeError(
            f"a plug-in's step must return the loss as a one-element tensor, got {what} "
            "(leave .item() to the library: it reads the loss on the schedule of "
            "TorchStep.loss_read_every)"
        )
