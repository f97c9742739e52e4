"""The queue API's answers (an allocation's queue, a job's ledger, its cohort), as the
OpenAPI schema describes them; fleet.api serves them."""

from __future__ import annotations

from rest_framework import serializers

from tenants.fields import StrictIntegerField

from .forms import LOCAL_QUEUE_MAX, PRIORITY_BOUNDS
from .queues.estimates import BASES


class QueueFiguresSerializer(serializers.Serializer):
    resource = serializers.CharField(help_text="nvidia.com/gpu, or mig.aifactory.io/<profile>")
    nominal = serializers.DecimalField(max_digits=12, decimal_places=4)
    borrowing_limit = serializers.DecimalField(max_digits=12, decimal_places=4,
                                               allow_null=True)
    in_use = serializers.DecimalField(max_digits=12, decimal_places=4)
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=4)
    in_cohort = serializers.BooleanField()
    active = serializers.BooleanField()
    inactive_reason = serializers.CharField(help_text=(
        "why Kueue admits nothing from this queue, in words with Kueue's own reason (empty "
        "while it is active)"))
    policy = serializers.CharField(help_text="the queue's preemption and borrowing policy, "
                                             "in words")
    resize_pending = serializers.CharField(help_text=(
        "a resize Kueue has not reported yet, in words (empty: the quota as read is the "
        "allocation's size)"))


class RunningSerializer(serializers.Serializer):
    name = serializers.CharField()
    devices = serializers.DecimalField(max_digits=12, decimal_places=4)
    since = serializers.DateTimeField(allow_null=True)
    time_limit_seconds = serializers.IntegerField(allow_null=True)
    priority = serializers.IntegerField()


class PendingSerializer(serializers.Serializer):
    name = serializers.CharField()
    devices = serializers.DecimalField(max_digits=12, decimal_places=4)
    priority = serializers.IntegerField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    position = serializers.IntegerField(allow_null=True,
                                        help_text="0 is next, in the allocation's queue")
    position_source = serializers.CharField(help_text="visibility (Kueue) or computed")
    waited_seconds = serializers.IntegerField()
    reason_code = serializers.ChoiceField(choices=["never", "queue-stopped", "deactivated",
                                                   "behind", "starting", "quota", "cohort"])
    reason = serializers.CharField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    estimate_basis = serializers.ChoiceField(
        choices=list(BASES),
        help_text="drain: the line ahead at the queue's measured admission rate; limits: the "
                  "running jobs' declared time limits; history: the queue's median wait")
    estimate_range = serializers.ListField(
        child=serializers.DateTimeField(), min_length=2, max_length=2, allow_null=True,
        help_text="[earliest, latest]: 10–90 % for drain and history, now → the bound for "
                  "limits; null without an estimate")
    estimate = serializers.CharField()


class DeactivatedSerializer(serializers.Serializer):
    name = serializers.CharField()
    devices = serializers.DecimalField(max_digits=12, decimal_places=4)
    stopped_at = serializers.DateTimeField(allow_null=True)
    reason_code = serializers.CharField(help_text="Kueue's eviction reason, e.g. "
                                                  "DeactivatedDueToMaximumExecutionTimeExceeded")
    reason = serializers.CharField()


class StoppingSerializer(serializers.Serializer):
    name = serializers.CharField()
    devices = serializers.DecimalField(max_digits=12, decimal_places=4,
                                       help_text="still reserved until its pods stop")
    admitted_at = serializers.DateTimeField(allow_null=True,
                                            help_text="the admission being stopped")
    stopped_at = serializers.DateTimeField(allow_null=True,
                                           help_text="when Kueue evicted or preempted it")
    kind = serializers.ChoiceField(choices=["preempted", "evicted"])
    reason_code = serializers.CharField(help_text="the Preempted condition's reason (e.g. "
                                                  "InClusterQueue, InCohortReclamation) or "
                                                  "the Evicted one's")
    reason = serializers.CharField()


class StopSerializer(serializers.Serializer):
    name = serializers.CharField()
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    reason = serializers.CharField()


class BasisRecordSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    median_error_seconds = serializers.FloatField()
    p90_error_seconds = serializers.FloatField()


class TrackRecordSerializer(serializers.Serializer):
    median_error_seconds = serializers.FloatField(allow_null=True)
    p90_error_seconds = serializers.FloatField(allow_null=True)
    by_basis = serializers.DictField(child=BasisRecordSerializer(),
                                     help_text="each basis scored on its own")
    count = serializers.IntegerField(help_text="admissions whose first estimate is compared")
    of_admissions = serializers.IntegerField(
        help_text="every admission in the last 14 days (the history's count)")


class DaySerializer(serializers.Serializer):
    day = serializers.DateField()
    admitted = serializers.IntegerField(source="admissions")
    wait_p50_seconds = serializers.FloatField(source="p50", allow_null=True)
    wait_p95_seconds = serializers.FloatField(source="p95", allow_null=True)
    preemptions = serializers.IntegerField()
    borrowed_device_hours = serializers.DecimalField(max_digits=14, decimal_places=2)
    borrowed_cost = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text="what billing charges for the borrowed "
        "device-hours (the pool's rate in each hour; 0 where borrowing is not billed)")


class HistoryGroupSerializer(serializers.Serializer):
    local_queue = serializers.CharField()
    priority = serializers.IntegerField()
    admitted = serializers.IntegerField(help_text="admissions in the last 14 days")


class SeamSerializer(serializers.Serializer):
    code = serializers.ChoiceField(choices=["admitted", "pods", "claimed", "scheduled",
                                            "running", "recovery"])
    label = serializers.CharField()
    what = serializers.CharField(help_text="from which step to which")
    count = serializers.IntegerField(help_text="measurements in the last 14 days")
    p50_seconds = serializers.FloatField(allow_null=True)
    p95_seconds = serializers.FloatField(allow_null=True)
    days = serializers.ListField(child=serializers.DateField(), help_text="the last 14 days")
    p95_by_day = serializers.ListField(child=serializers.FloatField(allow_null=True),
                                       help_text="p95 seconds of each day in `days` (null: "
                                                 "nothing measured that day)")


class LedgerStepSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["submitted", "admitted", "pods", "claimed",
                                            "scheduled", "running", "preempted", "evicted",
                                            "requeued", "finished", "gone"])
    label = serializers.CharField()
    at = serializers.DateTimeField(help_text="when it happened, as finely as Kubernetes "
                                             "tells (see at_source)")
    kube_at = serializers.DateTimeField(allow_null=True,
                                        help_text="the stamp Kubernetes recorded (whole "
                                                  "seconds; null: none)")
    at_source = serializers.ChoiceField(
        choices=["event", "watch", "object", "portal", ""],
        help_text="event: an events.k8s.io Event's eventTime; watch: when the portal's watch "
                  "saw the change; object: the object's stamp; portal: the portal's clock; "
                  "empty: recorded before sources were kept")
    at_bound_seconds = serializers.FloatField(
        allow_null=True, help_text="the step happened within this many seconds of `at`")
    seam_seconds = serializers.FloatField(allow_null=True,
                                          help_text="the seam this step closes, to the "
                                                    "millisecond where both ends are")
    reason = serializers.CharField()


class JobLedgerSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=["pending", "admitted", "stopping", "deactivated",
                                             "finished", "gone"],
                                    help_text="admitted: running; stopping: evicted or "
                                              "preempted, its pods still stopping")
    steps = LedgerStepSerializer(many=True)
    preemptions = serializers.IntegerField(help_text="times Kueue preempted it")
    stops = serializers.IntegerField(help_text="preemptions and other evictions")
    lost_run_seconds = serializers.FloatField(
        help_text="run time lost to those stops: from its start to each stop, summed")
    gpu_busy = serializers.FloatField(
        allow_null=True, help_text="mean activity of its GPUs while it ran, 0–1, from DCGM "
                                   "(DCGM_FI_PROF_GR_ENGINE_ACTIVE of its pods); null: not "
                                   "measured, or Prometheus has no series for its pods")
    gpu_memory_gb = serializers.FloatField(
        allow_null=True, help_text="the most GPU memory one of its GPUs held, GB "
                                   "(DCGM_FI_DEV_FB_USED)")
    utilisation_at = serializers.DateTimeField(
        allow_null=True, help_text="the end of the window measured; null: not measured yet")


class QueueQuerySerializer(serializers.Serializer):
    """Narrow the history to one LocalQueue and/or priority."""

    local_queue = serializers.CharField(required=False, max_length=LOCAL_QUEUE_MAX)
    priority = StrictIntegerField(required=False, min_value=PRIORITY_BOUNDS[0],
                                  max_value=PRIORITY_BOUNDS[1])


class QueueSerializer(serializers.Serializer):
    observed_at = serializers.DateTimeField(allow_null=True,
                                            help_text="when the portal last read the queue")
    queue = QueueFiguresSerializer(allow_null=True)
    borrowed_price_per_hour = serializers.DecimalField(max_digits=14, decimal_places=2)
    running = RunningSerializer(many=True)
    pending = PendingSerializer(many=True)
    stopping = StoppingSerializer(
        many=True, help_text="workloads Kueue evicted or preempted whose pods are still "
                             "stopping: not running, not waiting yet")
    deactivated = DeactivatedSerializer(
        many=True, help_text="workloads Kueue deactivated (spec.active false): not waiting, "
                             "holding nothing, until reactivated")
    preemptions = StopSerializer(many=True)
    estimates_track_record = TrackRecordSerializer()
    history = DaySerializer(many=True)
    history_groups = HistoryGroupSerializer(many=True)
    seams = SeamSerializer(many=True, help_text="p50/p95 per seam over the last 14 days, "
                                                "from the workload ledger")
    jobs = JobLedgerSerializer(many=True, help_text="the latest workloads, each step from "
                                                    "queued to finished")
    first_work = serializers.CharField(help_text=(
        "while no workload has ever reached the queue: how a first Job appears and why it may "
        "take a while (empty once work was seen)"))


class CohortRowSerializer(serializers.Serializer):
    queue = serializers.CharField()
    tenant = serializers.CharField()
    nominal = serializers.DecimalField(max_digits=12, decimal_places=4)
    in_use = serializers.DecimalField(max_digits=12, decimal_places=4)
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=4)
    lent = serializers.DecimalField(max_digits=12, decimal_places=4)
    pending = serializers.IntegerField()
    oldest_wait_seconds = serializers.FloatField(allow_null=True)
    blocked_by = serializers.ListField(child=serializers.CharField())


class CohortSerializer(serializers.Serializer):
    name = serializers.CharField()
    queues = CohortRowSerializer(many=True)
