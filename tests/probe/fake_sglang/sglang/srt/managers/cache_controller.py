"""Stand-in for sglang.srt.managers.cache_controller: LayerLoadingEvent, LayerDoneCounter and
the load path of HiCacheController, with the public call shapes (events recorded on the load
stream after each layer's copy; the reading stream waits on them in wait_until)."""

from sglang.srt.utils import get_device_module

device_module = get_device_module()


class LayerLoadingEvent:
    def __init__(self, num_layers: int):
        self._num_layers = num_layers
        self.load_events = [device_module.Event() for _ in range(num_layers)]
        self.start_event = device_module.Event()

    def complete(self, layer_index: int):
        assert 0 <= layer_index < self._num_layers
        self.load_events[layer_index].record()

    def wait(self, layer_index: int):
        device_module.current_stream().wait_event(self.load_events[layer_index])

    @property
    def finish_event(self):
        return self.load_events[-1]


class LayerDoneCounter:
    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self.num_counters = 3
        self.events = [LayerLoadingEvent(num_layers) for _ in range(self.num_counters)]
        self.producer_index = -1
        self.consumer_index = -1

    def update_producer(self):
        self.producer_index = (self.producer_index + 1) % self.num_counters
        assert self.events[self.producer_index].finish_event.query(), (
            "Producer finish event should be ready before being reused."
        )
        return self.producer_index

    def set_consumer(self, index: int):
        self.consumer_index = index

    def wait_until(self, threshold: int):
        if self.consumer_index < 0:
            return
        self.events[self.consumer_index].wait(threshold)

    def reset(self):
        self.producer_index = -1
        self.consumer_index = -1


class HiCacheController:
    """The load half: ``load()`` queues, ``start_loading()`` copies layer by layer on the load
    stream, recording each layer's event right after its copy."""

    def __init__(self, mem_pool_device, mem_pool_host, layer_num=None):
        self.mem_pool_device = mem_pool_device
        self.mem_pool_host = mem_pool_host
        self.layer_num = layer_num if layer_num is not None else mem_pool_device.layer_num
        self.load_stream = device_module.Stream()
        self.load_queue = []
        self.layer_done_counter = LayerDoneCounter(self.layer_num)
        self.mem_pool_device.register_layer_transfer_counter(self.layer_done_counter)

    def load(self, host_indices, device_indices):
        self.load_queue.append((host_indices, device_indices))
        return device_indices

    def start_loading(self) -> int:
        if not self.load_queue:
            return -1
        producer_id = self.layer_done_counter.update_producer()
        host_indices, device_indices = self.load_queue.pop(0)
        producer_event = self.layer_done_counter.events[producer_id]
        producer_event.start_event.record()
        with device_module.stream(self.load_stream):
            self.load_stream.wait_event(producer_event.start_event)
            for i in range(self.layer_num):
                self.mem_pool_host.load_to_device_per_layer(
                    self.mem_pool_device, host_indices, device_indices, i, "kernel"
                )
                producer_event.complete(i)
        return producer_id
