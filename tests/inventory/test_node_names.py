"""Issue 27 §8: node names with empty DNS labels (``a..b``, a leading or trailing dot) or over 253
characters are refused with a 400 that says why, everywhere a node name comes in:
node reports (staff and agent), the model's validator (admin and forms), the ledger import and
cluster sync. One function decides: ``apps.inventory.models.node_name_problem``.

A label over 63 characters stays accepted: Kubernetes' IsDNS1123Subdomain (the rule for Node names)
checks the whole name's 253 characters, not each label's, and a node the API server holds must not
make cluster sync refuse its cluster (tests/inventory/test_agent_scope.py keeps a 253-character one)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.clusters.sync import nodes_parse
from apps.core.errors import ValidationFailed
from apps.inventory.models import Cluster, Node, node_name_problem
from apps.inventory.services.ledger import ledger_import_csv
from tests.inventory.test_agent_scope import agent_client, post, t4_csv
from tests.inventory.test_ledger import make_csv

pytestmark = pytest.mark.django_db

CARD = "GPU-99999999-2222-4333-8444-555555555555"
LONG_LABEL = "x" * 64 + ".lab"
BAD = [
    ("a..b", "empty DNS label"),
    (".gpu-01", "empty DNS label"),
    ("gpu-01.", "empty DNS label"),
    ("gpu..01.lab", "empty DNS label"),
    ("a" * 254, "at most 253 characters"),
    ("gpu.-01", "DNS subdomain names"),
    ("gpu-.01", "DNS subdomain names"),
    ("GPU-01", "DNS subdomain names"),
]
GOOD = ["gpu-01", "a", "gpu-01.rack-3.lab", LONG_LABEL, ".".join(["a" * 63] * 3) + "." + "b" * 61]


@pytest.mark.parametrize(("name", "reason"), BAD)
def test_a_bad_node_name_is_refused_with_the_reason(name, reason):
    problem = node_name_problem(name)
    assert problem is not None and reason in problem


@pytest.mark.parametrize("name", GOOD)
def test_a_good_node_name_passes(name):
    assert len(name) <= 253 and node_name_problem(name) is None


@pytest.fixture
def cluster():
    return Cluster.objects.create(name="Lab", slug="lab")


@pytest.mark.parametrize(("name", "reason"), BAD[:4])
def test_a_node_report_for_a_bad_name_is_a_400_for_staff_and_agents(
    api_client, cluster, staff_user, name, reason
):
    as_agent = post(agent_client(api_client, cluster), name, t4_csv((0, CARD)))
    assert as_agent.status_code == 400, as_agent.content
    assert reason in as_agent.json()["error"]["message"]

    api_client.credentials()
    api_client.force_authenticate(staff_user)
    as_staff = post(api_client, name, t4_csv((0, CARD)), cluster="lab")
    assert as_staff.status_code == 400, as_staff.content
    assert reason in as_staff.json()["error"]["details"]["node"][0]
    assert not Node.objects.exists()


@pytest.mark.parametrize(("name", "reason"), BAD[:4])
def test_the_model_validator_refuses_it_for_the_admin_and_forms(cluster, name, reason):
    with pytest.raises(ValidationError) as caught:
        Node(cluster=cluster, name=name).full_clean()
    assert reason in str(caught.value.message_dict["name"])


@pytest.mark.parametrize(("name", "reason"), BAD[:4])
def test_the_ledger_import_refuses_it_and_writes_nothing(cluster, staff_user, name, reason):
    row = {"cluster": "lab", "node": name, "vendor": "nvidia", "device_index": "0", "uuid": CARD}
    with pytest.raises(ValidationFailed) as caught:
        ledger_import_csv(data=make_csv([row]), actor=staff_user)
    assert reason in str(caught.value.details)
    assert not Node.objects.exists()


@pytest.mark.parametrize(("name", "reason"), BAD[:4])
def test_cluster_sync_input_refuses_it(name, reason):
    with pytest.raises(ValidationFailed) as caught:
        nodes_parse([{"metadata": {"name": name}, "status": {}}])
    assert reason in caught.value.message and "items[0]" in caught.value.message
