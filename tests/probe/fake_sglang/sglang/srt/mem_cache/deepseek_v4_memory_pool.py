"""Stand-in for DeepSeekV4TokenToKVPool and its c4 indexer pool: the accessor names, the
``wait_layer_transfer`` gate and the layer mapping of the public source, with buffers from a
``make_buffer`` callable (simulated device or torch tensors).

FAKE_SGLANG_UNGATED_INDEX_K=1 at import models a version or fork whose index-K accessor lost
its ``wait_layer_transfer`` (the race); everything else stays gated.
"""

import os
from typing import NamedTuple

from sglang.srt.mem_cache.memory_pool import KVCache

_GATE_INDEX_K = os.environ.get("FAKE_SGLANG_UNGATED_INDEX_K") != "1"


class DeepSeekV4LayerItem(NamedTuple):
    compress_ratio: int
    compress_layer_id: int
    compress_kv_pool: object | None = None


class DeepSeekV4SingleKVPool:
    def __init__(self, layer_num, make_buffer):
        self.kv_buffer = [make_buffer() for _ in range(layer_num)]

    def get_key_buffer(self, layer_id: int):
        return self.kv_buffer[layer_id]


class DeepSeekV4IndexerPool:
    def __init__(self, layer_num, make_buffer):
        self.index_k_with_scale_buffer = [make_buffer() for _ in range(layer_num)]

    def get_index_k_with_scale_buffer(self, layer_id: int):
        return self.index_k_with_scale_buffer[layer_id]

    def get_index_k_scale_buffer(
        self, layer_id, seq_len_tensor, page_indices, seq_len_sum, max_seq_len
    ):
        buf = self.index_k_with_scale_buffer[layer_id]
        return buf, page_indices


class DeepSeekV4TokenToKVPool(KVCache):
    def __init__(
        self, compression_ratios, make_buffer, device="cpu", start_layer=None, end_layer=None
    ):
        super().__init__(
            0, 64, None, len(compression_ratios), device, False, start_layer, end_layer
        )
        self.compression_ratios = list(compression_ratios)
        counts = {0: 0, 4: 0, 128: 0}
        self.layer_mapping = []
        for ratio in self.compression_ratios:
            self.layer_mapping.append(DeepSeekV4LayerItem(ratio, counts[ratio]))
            counts[ratio] += 1
        self.swa_kv_pool = DeepSeekV4SingleKVPool(len(self.compression_ratios), make_buffer)
        self.kv_pools = {r: DeepSeekV4SingleKVPool(counts[r], make_buffer) for r in (4, 128)}
        self.layer_mapping = [
            DeepSeekV4LayerItem(r, i, self.kv_pools.get(r)) for r, i, _ in self.layer_mapping
        ]
        self.index_pools = {4: DeepSeekV4IndexerPool(counts[4], make_buffer)}
        self.c4_indexer_kv_pool = self.index_pools[4]

    def wait_layer_transfer(self, layer_id: int) -> None:
        if self.layer_transfer_counter is not None:
            self.layer_transfer_counter.wait_until(layer_id - self.start_layer)

    def _indexer_pool(self, compress_ratio):
        return self.index_pools[compress_ratio]

    def get_swa_key_buffer_radix(self, layer_id: int):
        self.wait_layer_transfer(layer_id)
        return self.swa_kv_pool.get_key_buffer(layer_id - self.start_layer)

    def get_extra_key_buffer(self, layer_id: int):
        self.wait_layer_transfer(layer_id)
        _, compress_layer_id, compress_kv_pool = self.layer_mapping[layer_id]
        return compress_kv_pool.get_key_buffer(compress_layer_id)

    def get_index_k_with_scale_buffer(self, layer_id: int):
        if _GATE_INDEX_K:
            self.wait_layer_transfer(layer_id)
        compress_ratio, compress_layer_id, _ = self.layer_mapping[layer_id]
        return self._indexer_pool(compress_ratio).get_index_k_with_scale_buffer(compress_layer_id)

    def get_index_k_scale_buffer(
        self, layer_id, seq_len_tensor, page_indices, seq_len_sum, max_seq_len
    ):
        self.wait_layer_transfer(layer_id)
        compress_ratio, compress_layer_id, _ = self.layer_mapping[layer_id]
        return self._indexer_pool(compress_ratio).get_index_k_scale_buffer(
            compress_layer_id, seq_len_tensor, page_indices, seq_len_sum, max_seq_len
        )
