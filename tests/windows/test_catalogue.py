"""The series catalogue's stored forms."""

from specdec_collector.windows.catalogue import labels_from_text, labels_to_text


def test_labels_text_round_trip() -> None:
    labels = (("engine", "0"), ("model_name", 'a "b",\n{c}'), ("x", "中"))
    assert labels_from_text(labels_to_text(labels)) == labels
    assert labels_to_text(labels) == '[["engine","0"],["model_name","a \\"b\\",\\n{c}"],["x","中"]]'
