"""hetcomm: collective communication for clusters that mix GPU types and network fabrics.

``import hetcomm.torch`` registers the "hetcomm" backend with torch.distributed.
"""
