"""What a node move says (fleet.allocations.moves.move_words): why the node leaves and the
reason given, each once."""
import pytest

from fleet.allocations.moves import move_words


def words(reason: str, leaving: str = "End of warranty"):
    return move_words(old="n1", new="n2", pool="Dedicated H100", namespace="acme-r1",
                      retiring_reason=leaving, reason=reason)


@pytest.mark.parametrize("given", ["End of warranty", "end of warranty.", "  End of  warranty!",
                                   "END OF WARRANTY"])
def test_the_retiring_reason_given_again_is_said_once(given):
    w = words(given)
    assert w.audit.casefold().count("warranty") == 1, w.audit
    assert w.notice.casefold().count("warranty") == 1 and "Reason given" not in w.notice


def test_a_reason_of_its_own_is_said_beside_why_the_node_leaves():
    w = words("Balancing the pool before the upgrade")
    assert "Balancing the pool before the upgrade (n1 is retiring: End of warranty)" in w.audit
    assert "Reason given: Balancing the pool before the upgrade" in w.notice
    assert "(End of warranty)" in w.notice
