"""tests.helpers.metrics: exact label matching (the substring matching it replaced counted `subresource`
series as `resource` ones)."""
from tests.helpers.metrics import metric_sum, series

TEXT = '''# HELP apiserver_request_total x
apiserver_request_total{code="200",resource="pods",subresource="",verb="GET"} 3
apiserver_request_total{code="200",resource="nodes",subresource="pods",verb="GET"} 5
apiserver_request_total{code="429",resource="pods",subresource="",verb="LIST"} 2
apiserver_request_total_other{resource="pods"} 100
plain_gauge 7.5
odd{v="a\\"b,c=\\"d\\"",w="x"} 1
'''


def test_labels_match_exactly():
    assert metric_sum(TEXT, "apiserver_request_total", resource="pods") == 5
    assert metric_sum(TEXT, "apiserver_request_total", subresource="pods") == 5
    assert metric_sum(TEXT, "apiserver_request_total", resource="pods", code="429") == 2
    assert metric_sum(TEXT, "apiserver_request_total") == 10
    assert metric_sum(TEXT, "apiserver_request_total", resource="secrets") == 0


def test_unlabelled_samples_and_escapes():
    assert metric_sum(TEXT, "plain_gauge") == 7.5
    assert series(TEXT, "odd") == [({"v": 'a"b,c="d"', "w": "x"}, 1.0)]
    assert metric_sum(TEXT, "odd", w="x") == 1
