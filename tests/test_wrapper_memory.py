"""The wrapper replay that memory tests compare stock Inductor and optimus_ir with."""

from optimus_ir.testing.wrapper_memory import peak_bytes

_WRAPPER = """
    def call(self, args):
            buf0 = empty_strided_cuda((1024, ), (1, ), torch.float32)
            buf1 = {reuse}; del buf0  # reuse
            buf2 = empty_strided_cuda((1024, ), (1, ), torch.float32)
            del buf1
            del buf2
def get_args():
    pass
"""


def test_a_buffer_handed_over_is_counted_once_whether_renamed_or_reinterpreted():
    for reuse in ("buf0", "reinterpret_tensor(buf0, (32, 32), (32, 1), 0)"):
        assert peak_bytes(_WRAPPER.format(reuse=reuse)) == 2 * 4096, reuse


def test_an_allocation_split_into_regions_is_freed_with_its_last_region():
    wrapper = """
    def call(self, args):
            buf9 = empty_strided_cuda((256, ), (1, ), torch.float32)
            buf0, buf1, = tensors_of(buf9, (128, 128))
            del buf9
            buf2 = empty_strided_cuda((256, ), (1, ), torch.float32)
            del buf0
            buf3 = empty_strided_cuda((256, ), (1, ), torch.float32)
            del buf1{then}
def get_args():
    pass
"""
    # buf9 lives on in buf1 when buf3 is allocated: 3 x 1024 bytes
    assert peak_bytes(wrapper.format(then="")) == 3 * 1024
    # and is freed with buf1: buf4 (2048 bytes) then joins buf2 and buf3 alone
    assert peak_bytes(wrapper.format(then="\n            buf4 = empty_strided_cuda((512, ), (1, ), torch.float32)")) == 4096
