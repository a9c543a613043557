# DinoVim-B + UperNet on ADE20K (512x512, 160k iterations, 8 GPUs x 2 images):
#   tools/dist_train.sh configs/dinovim_b_ade20k.py 8
# The recipe lives in configs/ade20k/ (upernet_dinovim-base-p16_paper-teacher_8xb2-amp-160k_...).
_base_ = './ade20k/upernet_dinovim-base-p16_paper-teacher_8xb2-amp-160k_ade20k-512x512.py'
