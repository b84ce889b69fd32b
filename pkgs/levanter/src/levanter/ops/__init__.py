"""Building blocks of the model's arithmetic that change how, not what, is computed: the blockwise
output softmax (:mod:`levanter.ops.cross_entropy`), its Pallas TPU kernels
(:mod:`levanter.ops.pallas_loss`, :mod:`levanter.ops.pallas_staged`) and the attention kernels (:mod:`levanter.ops.attention`)."""
