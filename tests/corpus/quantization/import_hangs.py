"""nf4.py loops forever while it is imported: only the NF4 functions fail."""

# target: nf4.py
# select: nf4_picks or nf4_codes or symmetric_int8_per_tensor
# fails: nf4
# kind: timeout
# message: did not finish within [\d.]+ s \(importing the submission's files\)

while True:
    pass
