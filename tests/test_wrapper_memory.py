"""The wrapper replay that memory tests compare stock Inductor and optimus_ir with."""

from wrapper_memory import peak_bytes

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
