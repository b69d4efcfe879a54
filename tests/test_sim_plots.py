"""sim/plots.py: the headless pyplot and the one way a figure is written."""

from sim.plots import pyplot, save_figure

PNG = b"\x89PNG\r\n\x1a\n"


def test_save_figure_writes_whole_files_and_closes(tmp_path):
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "a.png")
    assert path == tmp_path / "a.png" and path.read_bytes()[:8] == PNG
    assert not plt.fignum_exists(fig.number)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]     # no partial file left


def test_save_figure_formats(tmp_path):
    plt = pyplot()
    # No suffix: .png appended, as Figure.savefig does; an explicit format wins over the name.
    assert save_figure(plt.figure(), tmp_path / "b") == tmp_path / "b.png"
    assert (tmp_path / "b.png").read_bytes()[:8] == PNG
    save_figure(plt.figure(), tmp_path / "c.out", fmt="svg")
    assert b"<svg" in (tmp_path / "c.out").read_bytes()[:400]
