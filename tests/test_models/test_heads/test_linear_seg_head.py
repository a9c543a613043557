"""LinearSegHead against mmseg's FCNHead without convolutions (the oracle: an independent
implementation of the same logits, loss and predictions) given the same weights."""
import pytest
import torch
from mmengine.structures import PixelData

from dinomamba_mm.models.heads import LinearSegHead


def _oracle(in_channels, num_classes, align_corners):
    from mmseg.models.decode_heads import FCNHead
    return FCNHead(in_channels=in_channels, channels=in_channels, num_convs=0,
                   concat_input=False, dropout_ratio=0., num_classes=num_classes, norm_cfg=None,
                   align_corners=align_corners,
                   loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0))


def _samples(labels):
    from mmseg.structures import SegDataSample
    samples = []
    for label in labels:
        sample = SegDataSample()
        sample.gt_sem_seg = PixelData(data=label[None])
        samples.append(sample)
    return samples


@pytest.mark.parametrize('align_corners', [False, True])
def test_logits_loss_gradients_and_predictions_are_fcn_heads(align_corners):
    torch.manual_seed(0)
    num_classes, channels = 5, 6
    ours = LinearSegHead(channels, num_classes, align_corners=align_corners).double()
    theirs = _oracle(channels, num_classes, align_corners).double()
    theirs.conv_seg.load_state_dict(ours.conv_seg.state_dict())
    features = (torch.randn(3, 2, 3, 3, dtype=torch.float64),
                torch.randn(3, channels, 3, 4, dtype=torch.float64))  # in_index=-1 reads this
    labels = torch.randint(0, num_classes, (3, 12, 16))
    labels[0, :2] = 255  # ignored pixels: 0 in the mean over all pixels, as mmseg's default
    samples = _samples(labels)

    torch.testing.assert_close(ours(features), theirs(features), rtol=0, atol=0)
    ours_loss = ours.loss(features, samples, {})
    theirs_loss = theirs.loss(features, samples, {})
    assert set(ours_loss) == {'loss_ce'}  # and no per-batch pixel accuracy
    # mmseg divides the sum by the pixel count plus float32's epsilon: a relative 1e-7 / count
    torch.testing.assert_close(ours_loss['loss_ce'], theirs_loss['loss_ce'], rtol=1e-9, atol=0)
    ours_loss['loss_ce'].backward()
    theirs_loss['loss_ce'].backward()
    for name in ('weight', 'bias'):
        torch.testing.assert_close(getattr(ours.conv_seg, name).grad,
                                   getattr(theirs.conv_seg, name).grad, rtol=1e-9, atol=0)

    for metas in ([dict(img_shape=(12, 16), ori_shape=(12, 16))],
                  [dict(img_shape=(12, 16), pad_shape=(14, 18, 3))],
                  [dict(img_shape=torch.Size((9, 10)), pad_shape=(14, 18, 3))]):  # slide crop
        with torch.no_grad():
            torch.testing.assert_close(ours.predict(features, metas, {}),
                                       theirs.predict(features, metas, {}), rtol=0, atol=0)


def test_the_loss_of_a_hand_set_head_is_the_hand_computed_cross_entropy():
    """One patch, two classes, logits (0, log 3) resized to 2 x 2 (constant): every pixel's
    cross-entropy is -log(1/4) for label 0 and -log(3/4) for label 1."""
    head = LinearSegHead(1, 2)
    with torch.no_grad():
        head.conv_seg.weight.zero_()
        head.conv_seg.bias.copy_(torch.tensor([0., torch.log(torch.tensor(3.))]))
    labels = torch.tensor([[[0, 1], [1, 255]]])
    loss = head.loss((torch.zeros(1, 1, 1, 1), ), _samples(labels), {})['loss_ce']
    expected = (-torch.log(torch.tensor(0.25)) - 2 * torch.log(torch.tensor(0.75))) / 4
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


@pytest.mark.parametrize('argument, value', [('num_classes', 1), ('in_channels', 0),
                                             ('align_corners', 'no'), ('loss_weight', 'x'),
                                             ('loss_weight', 0.)])
def test_bad_arguments_are_named(argument, value):
    kwargs = dict(in_channels=4, num_classes=3)
    kwargs[argument] = value
    with pytest.raises((ValueError, TypeError), match=argument):
        LinearSegHead(**kwargs)
