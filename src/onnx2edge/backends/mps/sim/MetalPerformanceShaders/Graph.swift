// CPU model of MPSNNGraph and its nodes (MPSNNGraphNodes.h, MPSNNGraph.h).
//
// The graph is built from its result image back to its source images; each filter node makes
// its kernel once when the graph is made (convolution weights are read from the data source
// then: load(), weights(), purge()). At encode time each node's destination size comes from
// its padding policy: the size bits of paddingMethod(), then, with `.custom`, the policy's
// destinationImageDescriptor(forSourceImages:sourceStates:for:suggestedDescriptor:), which may
// also set the kernel's offset and edgeMode (MPSNeuralNetworkTypes.h, MPSNNPadding).
// An image node's format defaults to .none, "use the graph's format" (MPSNNGraph.format,
// .float16 by default); images hold values at their format's precision. Images are made by the
// node's imageAllocator (default: MPSTemporaryImage's, private GPU storage) except the graph's
// result, made by MPSNNGraph.destinationImageAllocator (default: MPSImage's).
//
// Declarations: Apple's Swift interface (Xcode 12 SDK MetalPerformanceShaders.swift,
// MPSNNGraphNodes.h, MPSNNGraph.h), listed with availability in apple_api.py.

import Foundation

/// MPSNNGraphNodes.h `MPSNNImageNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNImageNode: NSObject {
    public var handle: MPSHandle?
    /// MPSNNGraphNodes.h: MPSImageFeatureChannelFormatNone, the graph picks (MPSNNGraph.format).
    public var format: MPSImageFeatureChannelFormat = .none
    /// MPSNNGraphNodes.h: MPSTemporaryImage.defaultAllocator; an exported node's "image is still
    /// temporary" -- set MPSImage.defaultAllocator() to read it on the CPU.
    public var imageAllocator: MPSImageAllocator = MPSTemporaryImage.defaultAllocator()
    public var exportFromGraph: Bool = false
    /// Not modelled: run(inputs:) synchronises every image it reads itself (MPSImage.h).
    @available(iOS 11.3, macOS 10.13.4, *)
    public var synchronizeResource: Bool = true
    @available(iOS 12.0, macOS 10.14, *)
    public var stopGradient: Bool = false
    var simProducer: MPSNNFilterNode?

    public init(handle: MPSHandle?) { self.handle = handle }
}

/// The padding policy a filter node has until one is set. MPSNNGraphNodes.h does not give
/// each filter's default, so the model refuses to guess for filters whose window or stride
/// makes the policy matter (convolution, pooling): set paddingPolicy on those.
final class SimUnsetPadding: NSObject, MPSNNPadding {
    func paddingMethod() -> MPSNNPaddingMethod { [.centered, .topLeft, .sizeSame] }
    static var supportsSecureCoding: Bool { true }
    func encode(with coder: NSCoder) {}
    override init() {}
    init?(coder: NSCoder) {}
}

/// MPSNNGraphNodes.h `MPSNNFilterNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNFilterNode: NSObject {
    public let resultImage: MPSNNImageNode
    public var paddingPolicy: MPSNNPadding = SimUnsetPadding()
    public var label: String?
    let simSources: [MPSNNImageNode]

    init(simSources: [MPSNNImageNode]) {
        self.simSources = simSources
        resultImage = MPSNNImageNode(handle: nil)
        super.init()
        resultImage.simProducer = self
    }

    /// The kernel this node encodes (made once, by the graph).
    func simMakeKernel(_ device: MTLDevice) -> MPSKernel { fatalError("\(type(of: self)) is not modelled") }
}

// MARK: - Convolutions

/// MPSNeuralNetworkTypes.h `MPSNNConvolutionAccumulatorPrecisionOption` (iOS 11.3 / macOS 10.13.4).
public struct MPSNNConvolutionAccumulatorPrecisionOption: OptionSet {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }
    public static let half = MPSNNConvolutionAccumulatorPrecisionOption([])
    public static let float = MPSNNConvolutionAccumulatorPrecisionOption(rawValue: 1)
}

/// MPSNNGraphNodes.h `MPSCNNConvolutionNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNConvolutionNode: MPSNNFilterNode {
    let simWeights: MPSCNNConvolutionDataSource
    /// MPSNNGraphNodes.h (iOS 12 / macOS 10.14). The model sums in float32 and refuses .half;
    /// the default (.float here) is a guess.
    @available(iOS 12.0, macOS 10.14, *)
    public var accumulatorPrecision: MPSNNConvolutionAccumulatorPrecisionOption = .float
    public init(source sourceNode: MPSNNImageNode, weights: MPSCNNConvolutionDataSource) {
        simWeights = weights
        super.init(simSources: [sourceNode])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        if !accumulatorPrecision.contains(.float) { fatalError("CPU model of MPS: half-precision accumulation is not modelled") }
        return MPSCNNConvolution(device: device, weights: simWeights)
    }
}

/// MPSNNGraphNodes.h `MPSCNNFullyConnectedNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNFullyConnectedNode: MPSCNNConvolutionNode {
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNFullyConnected(device: device, weights: simWeights) }
}

/// MPSNNGraphNodes.h `MPSNNStateNode`, `MPSNNGradientStateNode`,
/// `MPSCNNConvolutionGradientStateNode` (none of their members are modelled).
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNStateNode: NSObject {}
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSNNGradientStateNode: MPSNNStateNode {}
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSCNNConvolutionGradientStateNode: MPSNNGradientStateNode {}

/// MPSNNGraphNodes.h `MPSCNNConvolutionTransposeNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNConvolutionTransposeNode: MPSCNNConvolutionNode {
    @available(iOS 11.3, macOS 10.13.4, *)
    public init(source sourceNode: MPSNNImageNode, convolutionGradientState: MPSCNNConvolutionGradientStateNode?,
                weights: MPSCNNConvolutionDataSource) {
        precondition(convolutionGradientState == nil, "CPU model of MPS: convolution gradient states are not modelled")
        super.init(source: sourceNode, weights: weights)
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNConvolutionTranspose(device: device, weights: simWeights) }
}

// MARK: - Pooling

/// MPSNNGraphNodes.h `MPSCNNPoolingNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNPoolingNode: MPSNNFilterNode {
    @available(iOS 12.0, macOS 10.14, *)
    public let kernelWidth: Int
    @available(iOS 12.0, macOS 10.14, *)
    public let kernelHeight: Int
    @available(iOS 12.0, macOS 10.14, *)
    public let strideInPixelsX: Int
    @available(iOS 12.0, macOS 10.14, *)
    public let strideInPixelsY: Int
    public init(source sourceNode: MPSNNImageNode, kernelWidth: Int, kernelHeight: Int, strideInPixelsX: Int, strideInPixelsY: Int) {
        self.kernelWidth = kernelWidth
        self.kernelHeight = kernelHeight
        self.strideInPixelsX = strideInPixelsX
        self.strideInPixelsY = strideInPixelsY
        super.init(simSources: [sourceNode])
    }
    public convenience init(source sourceNode: MPSNNImageNode, filterSize size: Int, stride: Int) {
        self.init(source: sourceNode, kernelWidth: size, kernelHeight: size, strideInPixelsX: stride, strideInPixelsY: stride)
    }
    public convenience init(source sourceNode: MPSNNImageNode, filterSize size: Int) {
        self.init(source: sourceNode, filterSize: size, stride: size)
    }
}

open class MPSCNNPoolingMaxNode: MPSCNNPoolingNode {
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        MPSCNNPoolingMax(device: device, kernelWidth: kernelWidth, kernelHeight: kernelHeight,
                         strideInPixelsX: strideInPixelsX, strideInPixelsY: strideInPixelsY)
    }
}

open class MPSCNNPoolingAverageNode: MPSCNNPoolingNode {
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        MPSCNNPoolingAverage(device: device, kernelWidth: kernelWidth, kernelHeight: kernelHeight,
                             strideInPixelsX: strideInPixelsX, strideInPixelsY: strideInPixelsY)
    }
}

// MARK: - Neurons (MPSNNGraphNodes.h)

/// MPSNNGraphNodes.h `MPSCNNNeuronNode` and its subclasses (iOS 11 / macOS 10.13; Power,
/// Exponential, Logarithm iOS 11.3 / macOS 10.13.4; GeLU iOS 13 / macOS 10.15). Only the
/// initialisers with explicit parameters are modelled.
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNNeuronNode: MPSNNFilterNode {
    let simDescriptor: MPSNNNeuronDescriptor
    public var a: Float { simDescriptor.a }
    public var b: Float { simDescriptor.b }
    public var c: Float { simDescriptor.c }
    @available(iOS 12.0, macOS 10.14, *)
    public init(source sourceNode: MPSNNImageNode, descriptor: MPSNNNeuronDescriptor) {
        simDescriptor = descriptor
        super.init(simSources: [sourceNode])
    }
    init(_ s: MPSNNImageNode, _ t: MPSCNNNeuronType, _ a: Float = 0, _ b: Float = 0, _ c: Float = 0) {
        simDescriptor = MPSNNNeuronDescriptor.cnnNeuronDescriptor(with: t, a: a, b: b, c: c)
        super.init(simSources: [s])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNNeuron(device: device, neuronDescriptor: simDescriptor) }
}

open class MPSCNNNeuronReLUNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float) { super.init(source, .reLU, a) }
    public init(source: MPSNNImageNode) { super.init(source, .reLU, 0) }
}
open class MPSCNNNeuronReLUNNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float) { super.init(source, .reLUN, a, b) }
}
open class MPSCNNNeuronLinearNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float) { super.init(source, .linear, a, b) }
}
open class MPSCNNNeuronSigmoidNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode) { super.init(source, .sigmoid) }
}
open class MPSCNNNeuronHardSigmoidNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float) { super.init(source, .hardSigmoid, a, b) }
}
open class MPSCNNNeuronTanHNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float) { super.init(source, .tanH, a, b) }
}
open class MPSCNNNeuronAbsoluteNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode) { super.init(source, .absolute) }
}
open class MPSCNNNeuronSoftPlusNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float) { super.init(source, .softPlus, a, b) }
}
open class MPSCNNNeuronSoftSignNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode) { super.init(source, .softSign) }
}
open class MPSCNNNeuronELUNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float) { super.init(source, .ELU, a) }
}
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSCNNNeuronPowerNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float, c: Float) { super.init(source, .power, a, b, c) }
}
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSCNNNeuronExponentialNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float, c: Float) { super.init(source, .exponential, a, b, c) }
}
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSCNNNeuronLogarithmNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, a: Float, b: Float, c: Float) { super.init(source, .logarithm, a, b, c) }
}
@available(iOS 13.0, macOS 10.15, *)
open class MPSCNNNeuronGeLUNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode) { super.init(source, .geLU) }
}
open class MPSCNNNeuronPReLUNode: MPSCNNNeuronNode {
    public init(source: MPSNNImageNode, aData: Data) {
        super.init(source: source, descriptor: MPSNNNeuronDescriptor.cnnNeuronPReLUDescriptor(with: aData, noCopy: false))
    }
}

// MARK: - Other unary nodes

open class MPSCNNSoftMaxNode: MPSNNFilterNode {
    public init(source sourceNode: MPSNNImageNode) { super.init(simSources: [sourceNode]) }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNSoftMax(device: device) }
}

open class MPSCNNLogSoftMaxNode: MPSNNFilterNode {
    public init(source sourceNode: MPSNNImageNode) { super.init(simSources: [sourceNode]) }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNLogSoftMax(device: device) }
}

/// MPSNNGraphNodes.h `MPSCNNNormalizationNode` (iOS 11 / macOS 10.13); defaults per
/// MPSCNNNormalization.h: alpha 1, beta 5, delta 1.
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNNormalizationNode: MPSNNFilterNode {
    public var alpha: Float = 1.0
    public var beta: Float = 5.0
    public var delta: Float = 1.0
}

/// MPSNNGraphNodes.h `MPSCNNCrossChannelNormalizationNode` (iOS 11 / macOS 10.13); the
/// kernel's window is MPSCNNNormalization.h's (see MPSCNNCrossChannelNormalization).
@available(iOS 11.0, macOS 10.13, *)
open class MPSCNNCrossChannelNormalizationNode: MPSCNNNormalizationNode {
    public var kernelSizeInFeatureChannels: Int
    public init(source sourceNode: MPSNNImageNode, kernelSize: Int) {
        kernelSizeInFeatureChannels = kernelSize
        super.init(simSources: [sourceNode])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        let k = MPSCNNCrossChannelNormalization(device: device, kernelSize: kernelSizeInFeatureChannels)
        k.alpha = alpha
        k.beta = beta
        k.delta = delta
        return k
    }
}

/// MPSNNGraphNodes.h `MPSCNNInstanceNormalizationNode` (iOS 11.3 / macOS 10.13.4).
@available(iOS 11.3, macOS 10.13.4, *)
open class MPSCNNInstanceNormalizationNode: MPSNNFilterNode {
    let simDataSource: MPSCNNInstanceNormalizationDataSource
    public init(source: MPSNNImageNode, dataSource: MPSCNNInstanceNormalizationDataSource) {
        simDataSource = dataSource
        super.init(simSources: [source])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSCNNInstanceNormalization(device: device, dataSource: simDataSource) }
}

open class MPSCNNUpsamplingNearestNode: MPSNNFilterNode {
    public let scaleFactorX: Double
    public let scaleFactorY: Double
    public init(source sourceNode: MPSNNImageNode, integerScaleFactorX: Int, integerScaleFactorY: Int) {
        scaleFactorX = Double(integerScaleFactorX)
        scaleFactorY = Double(integerScaleFactorY)
        super.init(simSources: [sourceNode])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        MPSCNNUpsamplingNearest(device: device, integerScaleFactorX: Int(scaleFactorX), integerScaleFactorY: Int(scaleFactorY))
    }
}

open class MPSCNNUpsamplingBilinearNode: MPSNNFilterNode {
    public let scaleFactorX: Double
    public let scaleFactorY: Double
    public let alignCorners: Bool
    public init(source sourceNode: MPSNNImageNode, integerScaleFactorX: Int, integerScaleFactorY: Int, alignCorners: Bool) {
        scaleFactorX = Double(integerScaleFactorX)
        scaleFactorY = Double(integerScaleFactorY)
        self.alignCorners = alignCorners
        super.init(simSources: [sourceNode])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        MPSCNNUpsamplingBilinear(device: device, integerScaleFactorX: Int(scaleFactorX), integerScaleFactorY: Int(scaleFactorY),
                                 alignCorners: alignCorners)
    }
}

/// MPSNNGraphNodes.h `MPSNNScaleNode` (iOS 11 / macOS 10.13): resample to `outputSize`.
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNScaleNode: MPSNNFilterNode {
    let simOutputSize: MTLSize
    public init(source sourceNode: MPSNNImageNode, outputSize size: MTLSize) {
        simOutputSize = size
        super.init(simSources: [sourceNode])
    }
}

/// MPSNNGraphNodes.h `MPSNNBilinearScaleNode` (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNBilinearScaleNode: MPSNNScaleNode {
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { MPSImageBilinearScale(device: device) }
}

/// MPSNNGraphNodes.h `MPSNNPadNode` (iOS 12.1 / macOS 10.14.1).
@available(iOS 12.1, macOS 10.14.1, *)
open class MPSNNPadNode: MPSNNFilterNode {
    public var fillValue: Float = 0
    let simBefore: MPSImageCoordinate
    let simAfter: MPSImageCoordinate
    let simEdgeMode: MPSImageEdgeMode
    public init(source: MPSNNImageNode, paddingSizeBefore: MPSImageCoordinate, paddingSizeAfter: MPSImageCoordinate,
                edgeMode: MPSImageEdgeMode) {
        simBefore = paddingSizeBefore
        simAfter = paddingSizeAfter
        simEdgeMode = edgeMode
        super.init(simSources: [source])
    }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        let k = MPSNNPad(device: device, paddingSizeBefore: simBefore, paddingSizeAfter: simAfter)
        k.edgeMode = simEdgeMode
        k.fillValue = fillValue
        return k
    }
}

// MARK: - Binary arithmetic (MPSNNGraphNodes.h MPSNNBinaryArithmeticNode)

/// MPSNNGraphNodes.h `MPSNNBinaryArithmeticNode` and subclasses (iOS 11 / macOS 10.13).
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNBinaryArithmeticNode: MPSNNFilterNode {
    public var primaryScale: Float = 1
    public var secondaryScale: Float = 1
    public var bias: Float = 0
    public var minimumValue: Float = -Float.greatestFiniteMagnitude
    public var maximumValue: Float = Float.greatestFiniteMagnitude
    public var primaryStrideInPixelsX: Int = 1
    public var primaryStrideInPixelsY: Int = 1
    public var primaryStrideInFeatureChannels: Int = 1
    public var secondaryStrideInPixelsX: Int = 1
    public var secondaryStrideInPixelsY: Int = 1
    public var secondaryStrideInFeatureChannels: Int = 1
    public init(leftSource left: MPSNNImageNode, rightSource right: MPSNNImageNode) { super.init(simSources: [left, right]) }
    public init(sources: [MPSNNImageNode]) {
        precondition(sources.count == 2)
        super.init(simSources: sources)
    }
    func simArithmetic(_ device: MTLDevice) -> MPSCNNArithmetic { fatalError() }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel {
        let k = simArithmetic(device)
        k.primaryScale = primaryScale
        k.secondaryScale = secondaryScale
        k.bias = bias
        k.minimumValue = minimumValue
        k.maximumValue = maximumValue
        k.primaryStrideInPixelsX = primaryStrideInPixelsX
        k.primaryStrideInPixelsY = primaryStrideInPixelsY
        k.primaryStrideInFeatureChannels = primaryStrideInFeatureChannels
        k.secondaryStrideInPixelsX = secondaryStrideInPixelsX
        k.secondaryStrideInPixelsY = secondaryStrideInPixelsY
        k.secondaryStrideInFeatureChannels = secondaryStrideInFeatureChannels
        return k
    }
}

open class MPSNNAdditionNode: MPSNNBinaryArithmeticNode {
    override func simArithmetic(_ device: MTLDevice) -> MPSCNNArithmetic { MPSCNNAdd(device: device) }
}
open class MPSNNSubtractionNode: MPSNNBinaryArithmeticNode {
    override func simArithmetic(_ device: MTLDevice) -> MPSCNNArithmetic { MPSCNNSubtract(device: device) }
}
open class MPSNNMultiplicationNode: MPSNNBinaryArithmeticNode {
    override func simArithmetic(_ device: MTLDevice) -> MPSCNNArithmetic { MPSCNNMultiply(device: device) }
}
open class MPSNNDivisionNode: MPSNNBinaryArithmeticNode {
    override func simArithmetic(_ device: MTLDevice) -> MPSCNNArithmetic { MPSCNNDivide(device: device) }
}

/// MPSNNGraphNodes.h MPSNNConcatenationNode: joins along feature channels. Each source lands
/// at a destinationFeatureChannelOffset that must be a multiple of 4 (the start of a texture
/// slice), so a source whose channel count is not a multiple of 4 leaves a gap before the
/// next one (23 + 9 channels -> the second source starts at channel 24, 33 channels in all).
open class MPSNNConcatenationNode: MPSNNFilterNode {
    public init(sources: [MPSNNImageNode]) { super.init(simSources: sources) }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { SimConcatenation(device: device) }
}

final class SimConcatenation: MPSKernel {
    func simOffsets(_ sources: [MPSImage]) -> ([Int], Int) {
        var offsets: [Int] = []
        var at = 0
        for s in sources {
            offsets.append(at)
            at += (s.featureChannels + 3) / 4 * 4
        }
        return (offsets, offsets.last! + sources.last!.featureChannels)
    }
    func simRun(_ sources: [MPSImage], _ dest: MPSImage) {
        let (offsets, _) = simOffsets(sources)
        for (s, off) in zip(sources, offsets) {
            let v = s.simHWC()
            v.withUnsafeBufferPointer { dest.simSetHWC($0.baseAddress!, stride: s.featureChannels, channels: s.featureChannels, channelOffset: off) }
        }
    }
}

// MARK: - Reductions (MPSNNGraphNodes.h MPSNNUnaryReductionNode, iOS 12.1 / macOS 10.14.1;
// https://developer.apple.com/documentation/metalperformanceshaders/mpsnnunaryreductionnode)

@available(iOS 12.1, macOS 10.14.1, *)
open class MPSNNUnaryReductionNode: MPSNNFilterNode {
    public init(source sourceNode: MPSNNImageNode) { super.init(simSources: [sourceNode]) }
    func simReduction(_ device: MTLDevice) -> SimReduction { fatalError("\(type(of: self)) is not modelled") }
    override func simMakeKernel(_ device: MTLDevice) -> MPSKernel { simReduction(device) }
}

open class MPSNNReductionRowMinNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceRowMin(device: d) } }
open class MPSNNReductionRowMaxNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceRowMax(device: d) } }
open class MPSNNReductionRowMeanNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceRowMean(device: d) } }
open class MPSNNReductionRowSumNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceRowSum(device: d) } }
open class MPSNNReductionColumnMinNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceColumnMin(device: d) } }
open class MPSNNReductionColumnMaxNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceColumnMax(device: d) } }
open class MPSNNReductionColumnMeanNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceColumnMean(device: d) } }
open class MPSNNReductionColumnSumNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceColumnSum(device: d) } }
open class MPSNNReductionFeatureChannelsMinNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceFeatureChannelsMin(device: d) } }
open class MPSNNReductionFeatureChannelsMaxNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceFeatureChannelsMax(device: d) } }
open class MPSNNReductionFeatureChannelsMeanNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceFeatureChannelsMean(device: d) } }
open class MPSNNReductionFeatureChannelsSumNode: MPSNNUnaryReductionNode { override func simReduction(_ d: MTLDevice) -> SimReduction { MPSNNReduceFeatureChannelsSum(device: d) } }
/// No MPSNNReduce* kernel reduces width and height at once; the node's result is 1 x 1.
open class MPSNNReductionSpatialMeanNode: MPSNNUnaryReductionNode {
    override func simReduction(_ d: MTLDevice) -> SimReduction { SimReduction(device: d, axis: .spatial, op: .mean) }
}

// MARK: - The graph (MPSNNGraph.h)

/// MPSNNGraph.h `MPSNNGraph` (iOS 11 / macOS 10.13), an MPSKernel.
@available(iOS 11.0, macOS 10.13, *)
open class MPSNNGraph: MPSKernel {
    public let resultImageIsNeeded: Bool
    /// MPSNNGraph.h: the format of intermediate images whose node's format is .none.
    public var format: MPSImageFeatureChannelFormat = .float16
    /// MPSNNGraph.h: allocates the result image (MPSImage.defaultAllocator() by default).
    public var destinationImageAllocator: MPSImageAllocator = MPSImage.defaultAllocator()
    public private(set) var sourceImageHandles: [MPSHandle] = []
    let simResult: MPSNNImageNode
    var simOrder: [MPSNNFilterNode] = []
    var simKernels: [ObjectIdentifier: MPSKernel] = [:]
    var simSources: [MPSNNImageNode] = []

    public init?(device: MTLDevice, resultImage: MPSNNImageNode, resultImageIsNeeded: Bool) {
        self.resultImageIsNeeded = resultImageIsNeeded
        simResult = resultImage
        super.init(device: device)
        if !simBuild([resultImage]) { return nil }
    }

    /// MPSNNGraph.h initWithDevice:resultImages:resultsAreNeeded: (iOS 13): "The first image in
    /// the array will be returned from the -encode method LHS. The rest will be included in the
    /// list of intermediate images."
    @available(iOS 13.0, macOS 10.15, *)
    public init?(device: MTLDevice, resultImages: [MPSNNImageNode], resultsAreNeeded: UnsafeMutablePointer<ObjCBool>?) {
        precondition(!resultImages.isEmpty, "MPSNNGraph: no result images")
        resultImageIsNeeded = resultsAreNeeded.map { $0[0].boolValue } ?? true
        simResult = resultImages[0]
        super.init(device: device)
        simExtraResults = Array(resultImages.dropFirst())
        if !simBuild(resultImages) { return nil }
    }

    var simExtraResults: [MPSNNImageNode] = []
    /// Images returned through `intermediateImages`: the extra results, then images marked
    /// `exportFromGraph` (MPSNNImageNode.h), in the order of `intermediateImageHandles`.
    var simExported: [MPSNNImageNode] = []

    /// MPSNNGraph.h: "Get a list of identifiers for intermediate images objects produced by the
    /// graph" (Swift: `var intermediateImageHandles: [any MPSHandle]?`).
    public var intermediateImageHandles: [MPSHandle]? { simExported.compactMap { $0.handle } }

    /// MPSNNGraph.h readCountForSourceImageAtIndex: (iOS 12.1 / macOS 10.14.1): how many
    /// filters of the graph read source image `index`.
    @available(iOS 12.1, macOS 10.14.1, *)
    public func readCountForSourceImage(at index: Int) -> Int {
        let image = simSources[index]
        return simOrder.reduce(0) { n, node in n + node.simSources.filter { $0 === image }.count }
    }

    private func simBuild(_ results: [MPSNNImageNode]) -> Bool {
        var seen = Set<ObjectIdentifier>()
        func visit(_ image: MPSNNImageNode) {
            guard let producer = image.simProducer else {
                if !simSources.contains(where: { $0 === image }) { simSources.append(image) }
                return
            }
            if seen.contains(ObjectIdentifier(producer)) { return }
            seen.insert(ObjectIdentifier(producer))
            for s in producer.simSources { visit(s) }
            simOrder.append(producer)
        }
        for r in results { visit(r) }
        if simOrder.isEmpty { return false }
        for node in simOrder { simKernels[ObjectIdentifier(node)] = node.simMakeKernel(device) }
        sourceImageHandles = simSources.compactMap { $0.handle }
        simExported = simExtraResults
        for node in simOrder where node.resultImage.exportFromGraph && !simExported.contains(where: { $0 === node.resultImage }) {
            simExported.append(node.resultImage)
        }
        return true
    }

    public func encode(to commandBuffer: MTLCommandBuffer, sourceImages: [MPSImage]) -> MPSImage? {
        simEncode(to: commandBuffer, sourceImages: sourceImages, intermediateImages: nil)
    }

    func simEncode(to commandBuffer: MTLCommandBuffer, sourceImages: [MPSImage], intermediateImages: NSMutableArray?) -> MPSImage? {
        precondition(sourceImages.count == simSources.count,
                     "MPSNNGraph: \(simSources.count) source images expected, \(sourceImages.count) given")
        var images: [ObjectIdentifier: MPSImage] = [:]
        for (node, image) in zip(simSources, sourceImages) { images[ObjectIdentifier(node)] = image }
        for node in simOrder {
            let srcs = node.simSources.map { images[ObjectIdentifier($0)]! }
            let kernel = simKernels[ObjectIdentifier(node)]!
            let dest: MPSImage
            let format = node.resultImage.format == .none ? self.format : node.resultImage.format
            let isResult = node.resultImage === simResult
            let allocator = isResult ? destinationImageAllocator : node.resultImage.imageAllocator
            func allocate(_ desc: MPSImageDescriptor) -> MPSImage {
                allocator.image(for: commandBuffer, imageDescriptor: desc, kernel: kernel)
            }
            switch kernel {
            case let k as MPSCNNKernel:
                if node.paddingPolicy is SimUnsetPadding
                    && (k is MPSCNNPooling || k is MPSCNNConvolutionTranspose
                        || (k is MPSCNNConvolution && !(k is MPSCNNFullyConnected)))
                    && (k.kernelWidth > 1 || k.kernelHeight > 1 || k.strideInPixelsX > 1 || k.strideInPixelsY > 1) {
                    fatalError("CPU model of MPS: \(type(of: node)) has no paddingPolicy; MPSNNGraphNodes.h does not give "
                               + "each filter's default, so the model does not guess it -- set paddingPolicy")
                }
                let method = node.paddingPolicy.paddingMethod()
                var size = k.simDefaultDestination(srcs, method: method)
                if let scale = node as? MPSNNBilinearScaleNode {
                    size = (scale.simOutputSize.width, scale.simOutputSize.height, srcs[0].featureChannels)
                }
                if k is MPSCNNConvolution || k is MPSCNNPooling { k.simDefaultOffset(srcs, size.w, size.h) }
                var desc = MPSImageDescriptor(channelFormat: format, width: size.w, height: size.h, featureChannels: size.c)
                if method.contains(.custom) {
                    desc = node.paddingPolicy.destinationImageDescriptor(
                        forSourceImages: srcs, sourceStates: nil, for: k, suggestedDescriptor: desc)
                }
                dest = allocate(desc)
                simEnqueue(commandBuffer) { k.simRun(srcs, dest) }
            case let k as MPSCNNArithmetic:
                let a = srcs[0]
                dest = allocate(MPSImageDescriptor(
                    channelFormat: format, width: a.width, height: a.height, featureChannels: a.featureChannels))
                simEnqueue(commandBuffer) { k.simRun(srcs, dest) }
            case let k as SimConcatenation:
                let (_, channels) = k.simOffsets(srcs)
                dest = allocate(MPSImageDescriptor(
                    channelFormat: format, width: srcs[0].width, height: srcs[0].height, featureChannels: channels))
                for s in srcs { precondition(s.width == dest.width && s.height == dest.height, "concatenation: sizes differ") }
                simEnqueue(commandBuffer) { k.simRun(srcs, dest) }
            default:
                fatalError("\(type(of: kernel)) is not modelled")
            }
            simEnqueue(commandBuffer) { dest.simNeedsSync = true }  // written by the GPU
            images[ObjectIdentifier(node.resultImage)] = dest
        }
        if let out = intermediateImages {
            for image in simExported { out.add(images[ObjectIdentifier(image)]!) }
        }
        return images[ObjectIdentifier(simResult)]
    }

    /// MPSNNGraph.h: `intermediateImages` "An optional NSMutableArray to receive any MPSImage
    /// objects exported as part of its operation" (the exported images and extra results).
    public func encode(to commandBuffer: MTLCommandBuffer, sourceImages: [MPSImage], sourceStates: [MPSState]?,
                       intermediateImages: NSMutableArray?, destinationStates: NSMutableArray?) -> MPSImage? {
        simEncode(to: commandBuffer, sourceImages: sourceImages, intermediateImages: intermediateImages)
    }

    /// MPSNNGraph.h: encodes into its own command buffer, returns the result image at once and
    /// calls the handler when the work is done (here: before returning).
    @discardableResult
    public func executeAsync(withSourceImages sourceImages: [MPSImage],
                             completionHandler handler: @escaping (MPSImage?, Error?) -> Void) -> MPSImage {
        let buffer = device.makeCommandQueue()!.makeCommandBuffer()!
        let result = encode(to: buffer, sourceImages: sourceImages)!
        buffer.commit()
        buffer.waitUntilCompleted()
        handler(result, nil)
        return result
    }
}
