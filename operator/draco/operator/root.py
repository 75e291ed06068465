"""The operator's composition root: one API client, one informer per kind it reads, the
controllers built over them, started after the sync barrier and stopped in reverse.

Like the agent's `main` and the webhook's `app`, everything the operator runs is put
together here, explicitly. Kopf runs it (`startup.py`: the startup and cleanup handlers
build, start and stop it); each controller's reactions are Kopf event handlers (its
``handlers.py``: methods of one object, bound to what they hand changes to), fed by the
informers built here (`draco.operator.feed`).

Every controller has one shape (:class:`Controller`): a constructor that takes the
process's client, its informers, the options and the probes (it builds its service and
the handlers bound to it, and subscribes to nothing yet), ``start`` once the informers are
synced (subscribe its handlers, start its workers), ``stop``. One controller takes one
more thing when it is built: the pool status controller answers over the allocation's
inventory, handed to it by :func:`build_controllers` from the allocation controller built
before it (the controllers never import each other). An eighth controller is a package
beside the seven with a ``handlers.py`` (its Kopf handlers and the order they are
subscribed in), a ``controller.py`` of that shape, its pure rules in the
pure layers (`draco.scheduling`, `draco.allocator`), and one line in
:func:`controllers_for`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol, cast

from draco.kube.client import Kube
from draco.logs import get_logger
from draco.operator.autoscaling.controller import AutoscalingController
from draco.operator.deviceclassstatus.controller import ClassStatusController
from draco.operator.devicetainteviction.controller import EvictionController
from draco.operator.informers import Informers
from draco.operator.options import OperatorOptions
from draco.operator.podwait.controller import PodWaitController
from draco.operator.resourceclaim.controller import LifecycleController
from draco.operator.resourcepoolstatus.controller import PoolStatusController
from draco.operator.resourcequota.controller import QuotaController
from draco.operator.scheduler.controller import AllocationController
from draco.runtime.health import Health
from draco.scheduling.demand import NO_DEMAND

__all__ = ["Controller", "ControllerKind", "Operator", "build_controllers", "controllers_for"]

log = get_logger(__name__)


class Controller(Protocol):
    """The one shape of the operator's controllers (see the module docstring)."""

    @property
    def name(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ControllerType(Protocol):
    def __call__(
        self, *, kube: Kube, informers: Informers, options: OperatorOptions, health: Health
    ) -> Controller: ...


#: A controller's type: one of the one shape, or the pool status controller (which is built
#: with the allocation's inventory as well, `build_controllers`).
ControllerKind = ControllerType | type[PoolStatusController]


def controllers_for(options: OperatorOptions) -> list[ControllerKind]:
    """The controllers this operator runs, in start order: the lifecycle first (it writes
    the nodes of claims allocated by an older draco before anyone reads them)."""
    chosen: list[ControllerKind] = [LifecycleController, QuotaController, PodWaitController]
    if not options.namespaces:
        # DeviceClass status describes the whole cluster: only an operator serving every
        # namespace sees every claim.
        chosen.append(ClassStatusController)
    else:
        log.info("DeviceClass status is not kept by an operator limited to namespaces")
    if options.device_taint_eviction:
        chosen.append(EvictionController)
    else:
        log.info("Device taint eviction is off (--no-device-taint-eviction)")
    if options.autoscaling:
        chosen.append(AutoscalingController)  # before the allocation: it is told of what fits nowhere
    chosen.append(AllocationController)
    # After the allocation: it answers over the allocation's inventory.
    chosen.append(PoolStatusController)
    return chosen


def build_controllers(
    kinds: Sequence[ControllerKind],
    *,
    kube: Kube,
    informers: Informers,
    options: OperatorOptions,
    health: Health,
) -> list[Controller]:
    """Each controller of ``kinds`` built, in order, with what it needs: the allocation
    controller with the autoscaling controller's demand when one was built before it, the
    pool status controller with the inventory of the allocation controller built before it."""
    built: list[Controller] = []
    allocation: AllocationController | None = None
    autoscaling: AutoscalingController | None = None
    for kind in kinds:
        controller: Controller
        if kind is AllocationController:
            # The one seam between two controllers: the allocation reports the pods it
            # cannot place to the autoscaling controller (docs/autoscaling.md).
            controller = AllocationController(
                kube=kube,
                informers=informers,
                options=options,
                health=health,
                demand=autoscaling.reports if autoscaling is not None else NO_DEMAND,
            )
        elif kind is PoolStatusController:
            if allocation is None:
                raise ValueError(
                    "the pool status controller answers over the allocation's inventory: "
                    "build the allocation controller before it"
                )
            controller = PoolStatusController(
                kube=kube,
                informers=informers,
                options=options,
                health=health,
                inventory=allocation.service.current_inventory,
            )
        else:
            controller = cast(ControllerType, kind)(
                kube=kube, informers=informers, options=options, health=health
            )
        if isinstance(controller, AllocationController):
            allocation = controller
        if isinstance(controller, AutoscalingController):
            autoscaling = controller
        built.append(controller)
    return built


class Operator:
    """Everything the operator runs (see the module docstring)."""

    def __init__(self, *, kube: Kube, options: OperatorOptions, health: Health) -> None:
        self.kube = kube
        self.options = options
        self.health = health
        self.informers = Informers.over(kube)
        self.controllers = build_controllers(
            controllers_for(options), kube=kube, informers=self.informers, options=options, health=health
        )
        self._started: list[Controller] = []

    async def start(self) -> None:
        """List every kind (the sync barrier), then start the controllers in order.

        Logs how long it took from the first LIST to the barrier (``listed_s``) and to
        the last controller started, that is ready (``startup_s``): what a restart costs
        before the operator allocates again (`benchmarks/versus_upstream.py` prints it)."""
        first_list = time.monotonic()
        await self.informers.start()
        listed_s = time.monotonic() - first_list
        for task in self.informers.tasks:
            self.health.watch(task.get_name(), task)
        log.info(
            "Informers synced",
            listed_s=round(listed_s, 2),
            **{informer.resource.plural: len(informer) for informer in self.informers},
        )
        for controller in self.controllers:
            # Stopped at the end even if its start fails half-way (its stop allows that).
            self._started.append(controller)
            await controller.start()
        log.info(
            "Operator ready", listed_s=round(listed_s, 2), startup_s=round(time.monotonic() - first_list, 2)
        )

    async def stop(self) -> None:
        """Stop the controllers in reverse order, then the watches."""
        while self._started:
            controller = self._started.pop()
            try:
                await controller.stop()
            except Exception:
                log.exception("Controller did not stop cleanly", controller=controller.name)
        await self.informers.stop()
