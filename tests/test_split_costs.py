"""What a piece of a split op costs on a device that computes channels in blocks (a CPU's SIMD lanes,
oneDNN's blocked layouts), and how many lanes this machine's CPU has."""

from __future__ import annotations

import pytest

from helpers import small_cnn_graph
from tfplace.core.costgraph import CHANNEL_BLOCK
from tfplace.core.device_model import DEVICE_MODELS, convert_graph
from tfplace.estimator.simd import cpu_float_lanes, float_lanes
from tfplace.split.costs import PIECE_OVERHEAD, piece_time


def _convolution(channels: int) -> dict[str, object]:
    return {"compute_time": 1.0, "output_shapes": ((4, 48, 48, channels),)}


def test_a_channel_piece_within_one_block_costs_the_whole_op():
    # 6 of 12 output channels in blocks of 16: the piece computes the one block the op computes
    assert piece_time(_convolution(12), "channel", 0.5, 4, channel_block=16) == pytest.approx(1.0)


@pytest.mark.parametrize(("share", "blocks"), [(0.5, 2 / 4), (0.25, 1 / 4), (40 / 64, 3 / 4)])
def test_a_channel_piece_costs_the_share_of_the_channel_blocks_it_computes(share, blocks):
    seconds = piece_time(_convolution(64), "channel", share, 4, channel_block=16)
    assert seconds == pytest.approx(PIECE_OVERHEAD + blocks * (1.0 - PIECE_OVERHEAD))


def test_without_blocks_or_recorded_channels_a_channel_piece_costs_its_share():
    proportional = PIECE_OVERHEAD + 0.5 * (1.0 - PIECE_OVERHEAD)
    assert piece_time(_convolution(12), "channel", 0.5, 4) == pytest.approx(proportional)
    assert piece_time({"compute_time": 1.0}, "channel", 0.5, 4, channel_block=16) == pytest.approx(
        proportional
    )


def test_blocks_of_channels_leave_batch_and_spatial_pieces_in_proportion():
    for dimension in ("batch", "height"):
        seconds = piece_time(_convolution(12), dimension, 0.5, 4, channel_block=16)
        assert seconds == pytest.approx(PIECE_OVERHEAD + 0.5 * (1.0 - PIECE_OVERHEAD))


def test_float_lanes_follow_the_widest_vector_unit_of_the_cpu_flags():
    assert float_lanes({"sse2", "avx", "avx2", "avx512f"}) == 16
    assert float_lanes({"sse2", "avx", "avx2"}) == 8
    assert float_lanes({"sse2"}) == 4
    assert float_lanes({"fp", "asimd"}) == 4
    assert float_lanes(set()) == 1


def test_the_cpus_lanes_are_read_from_its_first_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n\nprocessor\t: 1\nflags\t\t: avx512f\n")
    assert cpu_float_lanes(cpuinfo) == 8
    assert cpu_float_lanes(tmp_path / "missing") == 1


def test_a_graph_converted_to_another_device_keeps_no_channel_blocks_of_the_profiling_cpu():
    graph = small_cnn_graph()
    graph.graph[CHANNEL_BLOCK] = 16
    assert CHANNEL_BLOCK not in convert_graph(graph, DEVICE_MODELS["V100-32GB"]).graph
    assert graph.graph[CHANNEL_BLOCK] == 16
