"""DDP built on torch.nn.parallel.DistributedDataParallel: refused by the [forbidden] set
`data_parallel_library`."""
# target: ddp.py


class DDP(nn.Module):
    def __init__(self, module, bucket_cap_mb=25.0, group=None):
        super().__init__()
        self.module = module
        self.wrapped = torch.nn.parallel.DistributedDataParallel(
            module, bucket_cap_mb=bucket_cap_mb, process_group=group
        )

    def forward(self, *args, **kwargs):
        return self.wrapped(*args, **kwargs)

    def finish_gradient_synchronization(self):
        pass
