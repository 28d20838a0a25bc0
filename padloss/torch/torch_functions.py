"""torch's own functions that padloss.torch builds on, captured at import,
before :func:`padloss.torch.patch` can replace them in ``torch.nn.functional``."""
import torch.nn.functional

pad = torch.nn.functional.pad
l1_loss = torch.nn.functional.l1_loss
