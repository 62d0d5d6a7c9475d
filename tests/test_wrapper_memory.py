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


def test_symbolic_sizes_count_at_the_wrappers_example_sizes():
    # a dynamic-shape compile: s0 is bound from the call's arguments, its example value 64 in get_args
    wrapper = """
    def call(self, args):
            arg0_1, arg1_1 = args
            s0 = arg0_1
            ps0 = 2*s0
            buf0 = empty_strided_cuda(((s0 + 3)//4, 128), (128, 1), torch.float32)
            buf1 = empty_strided_cuda((ps0, ), (1, ), torch.float32)
def get_args():
    arg0_1 = 64
    arg1_1 = rand_strided((64, 8), (8, 1), device='cuda:0', dtype=torch.float32)
"""
    assert peak_bytes(wrapper) == 16 * 128 * 4 + 512
